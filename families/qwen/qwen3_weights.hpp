#pragma once
/// Qwen3 weights bound from a model file: matrices stay in the file's mapping (any GGUF type, or
/// F32/F16/BF16 safetensors); norms are copied to f32.
#include <families/common/tensor_binder.hpp>
#include <families/qwen/detail/cpu_ops.hpp>
#include <families/qwen/qwen3.hpp>
#include <tf/error.hpp>

#include <cstdint>
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

using families::name_style;
using families::tensor_binder;

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

/// Binds the embedding, the head (the embedding when tied or when the file has no head) and the
/// final norm into `w`.
template <class Weights, class Binder>
void bind_head(Weights& w, Binder const& b, qwen3_hparams const& hp) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* head = b.find(tensor_role::output, 0, true);
  if (!head && !hp.tie_word_embeddings)
    throw error("tf: {} model lacks the tensor {} and its embeddings are not tied", b.family,
                b.name_of(tensor_role::output, 0));
  w.output = head && !hp.tie_word_embeddings ? b.head_of(head, hp.vocab_size, h) : w.embd;
  w.output_norm = b.norm(tensor_role::output_norm, 0, h);
}

/// Binds layer `i`'s norms (attention, q, k and the pre-MLP norm) and attention matrices.
template <class Binder>
void bind_attention(qwen3_layer_weights& l, Binder const& b, qwen3_hparams const& hp, int i) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  l.attn_norm = b.norm(tensor_role::attn_norm, i, h);
  l.q_norm = b.norm(tensor_role::attn_q_norm, i, hd);
  l.k_norm = b.norm(tensor_role::attn_k_norm, i, hd);
  l.ffn_norm = b.norm(tensor_role::ffn_norm, i, h);
  l.q = b.mat(tensor_role::attn_q, i, q_out, h);
  l.k = b.mat(tensor_role::attn_k, i, kv_out, h);
  l.v = b.mat(tensor_role::attn_v, i, kv_out, h);
  l.o = b.mat(tensor_role::attn_output, i, h, q_out);
}

/// Binds layer `i`'s SwiGLU MLP (gate, up, down).
template <class Binder>
void bind_dense_mlp(qwen3_layer_weights& l, Binder const& b, qwen3_hparams const& hp, int i) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, ff = hp.intermediate_size;
  l.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
  l.up = b.mat(tensor_role::ffn_up, i, ff, h);
  l.down = b.mat(tensor_role::ffn_down, i, h, ff);
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`).
/// `style` picks GGUF or HF names. Throws tf::error on a missing tensor or a shape that disagrees
/// with `hp`.
template <class File>
qwen3_weights bind_weights(File const& file, qwen3_hparams const& hp, name_style style) {
  check_hparams(hp, "qwen3");
  tensor_binder<File, decltype(qwen3_tensors)> b{file, qwen3_tensors, style, "qwen3"};
  qwen3_weights w;
  w.hp = hp;
  bind_head(w, b, hp);
  for (int i = 0; i < hp.num_layers; ++i) {
    qwen3_layer_weights l;
    bind_attention(l, b, hp, i);
    bind_dense_mlp(l, b, hp, i);
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace tf::families::qwen
