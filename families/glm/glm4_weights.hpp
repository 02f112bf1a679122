#pragma once
/// GLM-4 dense weights bound from a model file: matrices stay in the file's mapping (any GGUF
/// type, or F32/F16/BF16 safetensors); norms and biases are copied to f32.
#include <families/glm/detail/cpu_ops.hpp>
#include <families/glm/glm4.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tf::families::glm {

using detail::matrix;

/// One decoder layer's weights; `gate_up` is [2 ff, hidden] (gate rows first) unless the file
/// stores `gate` and `up` apart, then `gate_up` is empty (rows == 0).
struct glm4_layer_weights {
  std::vector<float> attn_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // empty without attention_bias
  matrix q, k, v, o, gate_up, gate, up, down;
};

/// All of a GLM-4 model's weights; matrices point into the file, which must outlive this.
struct glm4_weights {
  glm4_hparams hp;
  matrix embd;    // [vocab, hidden]
  matrix output;  // [vocab, hidden]; the embedding when tied
  std::vector<float> output_norm;
  std::vector<glm4_layer_weights> layers;
};

/// Which column of the tensor map names the tensors.
enum class name_style { gguf, hf };

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`).
/// Throws tf::error on a missing tensor or a shape that disagrees with `hp`.
template <class File>
glm4_weights bind_weights(File const& file, glm4_hparams const& hp, name_style style) {
  auto name_of = [&](model::tensor_role role, int layer) {
    auto row = model::find_role(glm4_tensors, role);
    if (!row) throw error("tf: glm4 tensor map has no role {}", static_cast<int>(role));
    return model::expand(style == name_style::gguf ? row->gguf : row->hf, layer);
  };
  auto find = [&](model::tensor_role role, int layer, bool optional) {
    auto name = name_of(role, layer);
    auto const* t = file.find_tensor(name);
    if (!t && !optional) throw error("tf: glm4 model lacks the tensor {}", name);
    return t;
  };
  auto mat = [&](model::tensor_role role, int layer, std::int64_t rows, std::int64_t cols) {
    auto const* t = find(role, layer, false);
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
      throw error("tf: glm4 tensor {} has dims [{}], expected [{}, {}] (row length first)", t->name,
                  fmt::join(t->dims, ", "), cols, rows);
    matrix m{t->type, rows, cols, t->data,
             model::row_bytes(t->type, static_cast<std::uint64_t>(cols))};
    if (m.row_bytes * static_cast<std::uint64_t>(rows) > t->bytes)
      throw error("tf: glm4 tensor {} holds {} bytes, {} rows of {} need {}", t->name, t->bytes,
                  rows, m.row_bytes, m.row_bytes * static_cast<std::uint64_t>(rows));
    return m;
  };
  auto vec = [&](model::tensor_role role, int layer, std::int64_t n) {
    auto const* t = find(role, layer, false);
    if (t->elements() != n)
      throw error("tf: glm4 tensor {} has {} elements, expected {}", t->name, t->elements(), n);
    if (model::row_bytes(t->type, static_cast<std::uint64_t>(n)) > t->bytes)
      throw error("tf: glm4 tensor {} holds only {} bytes", t->name, t->bytes);
    std::vector<float> w(static_cast<std::size_t>(n));
    kernels::cpu::dequantize_row(t->type, t->data, w.data(), n);
    return w;
  };
  if (hp.num_heads <= 0 || hp.num_kv_heads <= 0 || hp.num_heads % hp.num_kv_heads != 0 ||
      hp.head_dim <= 0 || hp.rope_dims < 0 || hp.rope_dims > hp.head_dim || hp.rope_dims % 2 != 0 ||
      hp.hidden_size <= 0 || hp.num_layers <= 0 || hp.vocab_size <= 0 || hp.intermediate_size <= 0)
    throw error(
        "tf: glm4 hparams are inconsistent: heads {} kv_heads {} head_dim {} rope_dims {} "
        "hidden {} layers {} vocab {} ffn {}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.rope_dims, hp.hidden_size, hp.num_layers,
        hp.vocab_size, hp.intermediate_size);
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  glm4_weights w;
  w.hp = hp;
  w.embd = mat(tensor_role::token_embd, 0, hp.vocab_size, h);
  w.output =
      find(tensor_role::output, 0, true) ? mat(tensor_role::output, 0, hp.vocab_size, h) : w.embd;
  w.output_norm = vec(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers; ++i) {
    glm4_layer_weights l;
    l.attn_norm = vec(tensor_role::attn_norm, i, h);
    l.post_attn_norm = vec(tensor_role::post_attention_norm, i, h);
    l.ffn_norm = vec(tensor_role::ffn_norm, i, h);
    l.post_ffw_norm = vec(tensor_role::post_ffw_norm, i, h);
    l.q = mat(tensor_role::attn_q, i, q_out, h);
    l.k = mat(tensor_role::attn_k, i, kv_out, h);
    l.v = mat(tensor_role::attn_v, i, kv_out, h);
    if (hp.attention_bias) {
      l.q_bias = vec(tensor_role::attn_q_bias, i, q_out);
      l.k_bias = vec(tensor_role::attn_k_bias, i, kv_out);
      l.v_bias = vec(tensor_role::attn_v_bias, i, kv_out);
    }
    l.o = mat(tensor_role::attn_output, i, h, q_out);
    if (find(tensor_role::ffn_gate, i, true)) {
      l.gate = mat(tensor_role::ffn_gate, i, ff, h);
      l.up = mat(tensor_role::ffn_up, i, ff, h);
    } else {
      l.gate_up = mat(tensor_role::ffn_up, i, 2 * ff, h);
    }
    l.down = mat(tensor_role::ffn_down, i, h, ff);
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace tf::families::glm
