#pragma once
/// Qwen3 weights bound from a model file: matrices stay in the file's mapping (any GGUF type, or
/// F32/F16/BF16 safetensors); norms are copied to f32.
#include <families/qwen/detail/cpu_ops.hpp>
#include <families/qwen/qwen3.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tf::families::qwen {

using detail::matrix;

/// One decoder layer's weights.
struct qwen3_layer_weights {
  std::vector<float> attn_norm, q_norm, k_norm, ffn_norm;
  matrix q, k, v, o, gate, up, down;
};

/// All of a Qwen3 model's weights; matrices point into the file, which must outlive this.
struct qwen3_weights {
  qwen3_hparams hp;
  matrix embd;    // [vocab, hidden]
  matrix output;  // [vocab, hidden]; the embedding when tied
  std::vector<float> output_norm;
  std::vector<qwen3_layer_weights> layers;
};

/// Which column of the tensor map names the tensors.
enum class name_style { gguf, hf };

/// Binds one file's tensors by role (GGUF or HF names), checking shapes; shared by the Qwen
/// families.
template <class File, class Map>
struct tensor_binder {
  File const& file;
  Map const& map;
  name_style style;
  char const* family;

  std::string name_of(model::tensor_role role, int layer) const {
    auto row = model::find_role(map, role);
    if (!row) throw error("tf: {} tensor map has no role {}", family, static_cast<int>(role));
    return model::expand(style == name_style::gguf ? row->gguf : row->hf, layer);
  }
  auto const* find(model::tensor_role role, int layer, bool optional) const {
    auto name = name_of(role, layer);
    auto const* t = file.find_tensor(name);
    if (!t && !optional) throw error("tf: {} model lacks the tensor {}", family, name);
    return t;
  }
  template <class T>
  matrix mat_of(T const* t, std::int64_t rows, std::int64_t cols) const {
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
      throw error("tf: {} tensor {} has dims [{}], expected [{}, {}] (row length first)", family,
                  t->name, fmt::join(t->dims, ", "), cols, rows);
    matrix m{t->type, rows, cols, t->data,
             model::row_bytes(t->type, static_cast<std::uint64_t>(cols))};
    if (m.row_bytes * static_cast<std::uint64_t>(rows) > t->bytes)
      throw error("tf: {} tensor {} holds {} bytes, {} rows of {} need {}", family, t->name,
                  t->bytes, rows, m.row_bytes, m.row_bytes * static_cast<std::uint64_t>(rows));
    return m;
  }
  matrix mat(model::tensor_role role, int layer, std::int64_t rows, std::int64_t cols) const {
    return mat_of(find(role, layer, false), rows, cols);
  }
  std::vector<float> norm(model::tensor_role role, int layer, std::int64_t n) const {
    auto const* t = find(role, layer, false);
    if (t->elements() != n)
      throw error("tf: {} norm {} has {} elements, expected {}", family, t->name, t->elements(), n);
    if (model::row_bytes(t->type, static_cast<std::uint64_t>(n)) > t->bytes)
      throw error("tf: {} norm {} holds only {} bytes", family, t->name, t->bytes);
    std::vector<float> w(static_cast<std::size_t>(n));
    kernels::cpu::dequantize_row(t->type, t->data, w.data(), n);
    return w;
  }
};

/// Throws tf::error when `hp` cannot describe a model.
inline void check_hparams(qwen3_hparams const& hp, char const* family) {
  if (hp.num_heads <= 0 || hp.num_kv_heads <= 0 || hp.num_heads % hp.num_kv_heads != 0 ||
      hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.hidden_size <= 0 || hp.num_layers <= 0 ||
      hp.vocab_size <= 0 || hp.intermediate_size <= 0)
    throw error(
        "tf: {} hparams are inconsistent: heads {} kv_heads {} head_dim {} hidden {} layers {} "
        "vocab {} ffn {}",
        family, hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.hidden_size, hp.num_layers,
        hp.vocab_size, hp.intermediate_size);
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`).
/// `style` picks GGUF or HF names. The head is the embedding when tied or when the file has no
/// head. Throws tf::error on a missing tensor or a shape that disagrees with `hp`.
template <class File>
qwen3_weights bind_weights(File const& file, qwen3_hparams const& hp, name_style style) {
  check_hparams(hp, "qwen3");
  using model::tensor_role;
  tensor_binder<File, decltype(qwen3_tensors)> b{file, qwen3_tensors, style, "qwen3"};
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  qwen3_weights w;
  w.hp = hp;
  w.embd = b.mat(tensor_role::token_embd, 0, hp.vocab_size, h);
  auto const* head = b.find(tensor_role::output, 0, true);
  if (!head && !hp.tie_word_embeddings)
    throw error("tf: qwen3 model lacks the tensor {} and its embeddings are not tied",
                b.name_of(tensor_role::output, 0));
  w.output = head && !hp.tie_word_embeddings ? b.mat_of(head, hp.vocab_size, h) : w.embd;
  w.output_norm = b.norm(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers; ++i) {
    qwen3_layer_weights l;
    l.attn_norm = b.norm(tensor_role::attn_norm, i, h);
    l.q_norm = b.norm(tensor_role::attn_q_norm, i, hd);
    l.k_norm = b.norm(tensor_role::attn_k_norm, i, hd);
    l.ffn_norm = b.norm(tensor_role::ffn_norm, i, h);
    l.q = b.mat(tensor_role::attn_q, i, q_out, h);
    l.k = b.mat(tensor_role::attn_k, i, kv_out, h);
    l.v = b.mat(tensor_role::attn_v, i, kv_out, h);
    l.o = b.mat(tensor_role::attn_output, i, h, q_out);
    l.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
    l.up = b.mat(tensor_role::ffn_up, i, ff, h);
    l.down = b.mat(tensor_role::ffn_down, i, h, ff);
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace tf::families::qwen
