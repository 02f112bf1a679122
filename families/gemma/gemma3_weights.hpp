#pragma once
/// Gemma 3 weights bound from a model file: matrices stay in the file's mapping (any GGUF type,
/// or F32/F16/BF16 safetensors); norms are copied to f32 with the (1 + w) shift applied for HF.
#include <families/gemma/detail/cpu_ops.hpp>
#include <families/gemma/gemma3.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tf::families::gemma {

using detail::matrix;

/// One decoder layer's weights.
struct gemma3_layer_weights {
  std::vector<float> attn_norm, q_norm, k_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  matrix q, k, v, o, gate, up, down;
};

/// All of a Gemma 3 model's weights; matrices point into the file, which must outlive this.
struct gemma3_weights {
  gemma3_hparams hp;
  matrix embd;    // [vocab, hidden]
  matrix output;  // [vocab, hidden]; the embedding when tied
  std::vector<float> output_norm;
  std::vector<gemma3_layer_weights> layers;
};

/// Which column of the tensor map names the tensors.
enum class name_style { gguf, hf };

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`).
/// `style` picks GGUF or HF names; HF norms get (1 + w). Throws tf::error on a missing tensor
/// or a shape that disagrees with `hp`.
template <class File>
gemma3_weights bind_weights(File const& file, gemma3_hparams const& hp, name_style style) {
  auto name_of = [&](model::tensor_role role, int layer) {
    auto row = model::find_role(gemma3_tensors, role);
    if (!row) throw error("tf: gemma3 tensor map has no role {}", static_cast<int>(role));
    return model::expand(style == name_style::gguf ? row->gguf : row->hf, layer);
  };
  auto find = [&](model::tensor_role role, int layer, bool optional) {
    auto name = name_of(role, layer);
    auto const* t = file.find_tensor(name);
    if (!t && !optional) throw error("tf: gemma3 model lacks the tensor {}", name);
    return t;
  };
  auto mat = [&](model::tensor_role role, int layer, std::int64_t rows, std::int64_t cols) {
    auto const* t = find(role, layer, false);
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
      throw error("tf: gemma3 tensor {} has dims [{}], expected [{}, {}] (row length first)",
                  t->name, fmt::join(t->dims, ", "), cols, rows);
    matrix m{t->type, rows, cols, t->data,
             model::row_bytes(t->type, static_cast<std::uint64_t>(cols))};
    if (m.row_bytes * static_cast<std::uint64_t>(rows) > t->bytes)
      throw error("tf: gemma3 tensor {} holds {} bytes, {} rows of {} need {}", t->name, t->bytes,
                  rows, m.row_bytes, m.row_bytes * static_cast<std::uint64_t>(rows));
    return m;
  };
  auto norm = [&](model::tensor_role role, int layer, std::int64_t n) {
    auto const* t = find(role, layer, false);
    if (t->elements() != n)
      throw error("tf: gemma3 norm {} has {} elements, expected {}", t->name, t->elements(), n);
    if (model::row_bytes(t->type, static_cast<std::uint64_t>(n)) > t->bytes)
      throw error("tf: gemma3 norm {} holds only {} bytes", t->name, t->bytes);
    std::vector<float> w(static_cast<std::size_t>(n));
    kernels::cpu::dequantize_row(t->type, t->data, w.data(), n);
    if (style == name_style::hf)
      for (auto& x : w) x = 1.0f + x;  // HF stores zero-centred norm weights
    return w;
  };
  if (hp.num_heads <= 0 || hp.num_kv_heads <= 0 || hp.num_heads % hp.num_kv_heads != 0 ||
      hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.hidden_size <= 0 || hp.num_layers <= 0 ||
      hp.vocab_size <= 0 || hp.intermediate_size <= 0)
    throw error(
        "tf: gemma3 hparams are inconsistent: heads {} kv_heads {} head_dim {} hidden {} "
        "layers {} vocab {} ffn {}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.hidden_size, hp.num_layers, hp.vocab_size,
        hp.intermediate_size);
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  gemma3_weights w;
  w.hp = hp;
  // The head reads all of its matrix each token: the sequential rows8 layout where it can.
  w.embd = in_rows8(file, *find(tensor_role::token_embd, 0, false),
                    mat(tensor_role::token_embd, 0, hp.vocab_size, h));
  auto const* out = find(tensor_role::output, 0, true);
  w.output = out ? in_rows8(file, *out, mat(tensor_role::output, 0, hp.vocab_size, h)) : w.embd;
  w.output_norm = norm(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers; ++i) {
    gemma3_layer_weights l;
    l.attn_norm = norm(tensor_role::attn_norm, i, h);
    l.q_norm = norm(tensor_role::attn_q_norm, i, hd);
    l.k_norm = norm(tensor_role::attn_k_norm, i, hd);
    l.post_attn_norm = norm(tensor_role::post_attention_norm, i, h);
    l.ffn_norm = norm(tensor_role::ffn_norm, i, h);
    l.post_ffw_norm = norm(tensor_role::post_ffw_norm, i, h);
    l.q = mat(tensor_role::attn_q, i, q_out, h);
    l.k = mat(tensor_role::attn_k, i, kv_out, h);
    l.v = mat(tensor_role::attn_v, i, kv_out, h);
    l.o = mat(tensor_role::attn_output, i, h, q_out);
    l.gate = mat(tensor_role::ffn_gate, i, ff, h);
    l.up = mat(tensor_role::ffn_up, i, ff, h);
    l.down = mat(tensor_role::ffn_down, i, h, ff);
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace tf::families::gemma
