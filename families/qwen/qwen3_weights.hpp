#pragma once
/// Qwen3 weights bound from a model file to a backend: matrices as the file holds them (any GGUF
/// type, or F32/F16/BF16 safetensors); norms in f32.
#include <families/common/tensor_binder.hpp>
#include <families/qwen/qwen3_config.hpp>
#include <families/qwen/qwen3_hparams.hpp>
#include <tf/error.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/model/model_file.hpp>

#include <cstdint>
#include <vector>

namespace tf::families::qwen {

/// One decoder layer's weights on backend B.
template <class B>
struct qwen3_layer_weights {
  typename B::vector attn_norm, ffn_norm;
  layers::attention_weights<B> attn;  // with per-head q/k norms
  layers::mlp_weights<B> mlp;
};

/// All of a Qwen3 model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct qwen3_weights {
  qwen3_hparams hp;
  typename B::matrix embd;    // [vocab, hidden]
  typename B::matrix output;  // [vocab, hidden]; the embedding when tied
  typename B::vector output_norm;
  std::vector<qwen3_layer_weights<B>> layers;
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
  w.output = head && !hp.tie_word_embeddings ? b.vocab_head(head, hp.vocab_size, h)
                                             : b.vocab_split(w.embd);
  w.output_norm = b.norm(tensor_role::output_norm, 0, h);
}

/// Binds layer `i`'s norms (attention, q, k and the pre-MLP norm) and attention matrices.
template <class Layer, class Binder>
void bind_attention(Layer& l, Binder const& b, qwen3_hparams const& hp, int i) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  l.attn_norm = b.norm(tensor_role::attn_norm, i, h);
  l.attn.q_norm = b.norm(tensor_role::attn_q_norm, i, hd);
  l.attn.k_norm = b.norm(tensor_role::attn_k_norm, i, hd);
  l.ffn_norm = b.norm(tensor_role::ffn_norm, i, h);
  l.attn.q = b.mat(tensor_role::attn_q, i, q_out, h);
  l.attn.k = b.mat(tensor_role::attn_k, i, kv_out, h);
  l.attn.v = b.mat(tensor_role::attn_v, i, kv_out, h);
  l.attn.o = b.mat(tensor_role::attn_output, i, h, q_out);
}

/// Binds layer `i`'s SwiGLU MLP (gate, up, down).
template <class Layer, class Binder>
void bind_dense_mlp(Layer& l, Binder const& b, qwen3_hparams const& hp, int i) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, ff = hp.intermediate_size;
  l.mlp.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
  l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
  l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names. Throws tf::error on a missing tensor or a shape that disagrees
/// with `hp`.
template <class File, class B>
qwen3_weights<B> bind_weights(File const& file, qwen3_hparams const& hp, name_style style, B& be) {
  check_hparams(hp, "qwen3");
  tensor_binder<File, decltype(qwen3_tensors), B> const b{file, qwen3_tensors, style, "qwen3", be};
  qwen3_weights<B> w;
  w.hp = per_rank(hp, b.ranks(), "qwen3");  // this rank's heads and FFN width
  bind_head(w, b, w.hp);
  for (int i = 0; i < hp.num_layers; ++i) {
    auto& l = w.layers.emplace_back();
    bind_attention(l, b, w.hp, i);
    bind_dense_mlp(l, b, w.hp, i);
  }
  return w;
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
qwen3_weights<B> load_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_weights(*g, hparams_from_gguf(*g), name_style::gguf, be);
  auto const arch = file.architecture();
  if (arch != "qwen3") throw error("tf: expected a qwen3 config.json, model_type is '{}'", arch);
  return bind_weights(*file.hf(), hparams_from_config(file.hf()->config()), name_style::hf, be);
}

}  // namespace tf::families::qwen
