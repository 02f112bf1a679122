#pragma once
/// GLM-4 dense weights bound from a model file to a backend: matrices as the file holds them (any
/// GGUF type, or F32/F16/BF16 safetensors); norms and biases in f32.
#include <families/common/tensor_binder.hpp>
#include <families/glm/glm4_config.hpp>
#include <families/glm/glm4_hparams.hpp>
#include <tf/error.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/model/model_file.hpp>

#include <cstdint>
#include <vector>

namespace tf::families::glm {

/// One decoder layer's weights on backend B. The MLP's `gate_up` is [2 ff, hidden] (gate rows
/// first) unless the file stores `gate` and `up` apart; the attention's biases are empty without
/// attention_bias.
template <class B>
struct glm4_layer_weights {
  typename B::vector attn_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  layers::attention_weights<B> attn;
  layers::mlp_weights<B> mlp;
};

/// All of a GLM-4 model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct glm4_weights {
  glm4_hparams hp;
  typename B::matrix embd;    // [vocab, hidden]
  typename B::matrix output;  // [vocab, hidden]; the embedding when tied
  typename B::vector output_norm;
  std::vector<glm4_layer_weights<B>> layers;
};

using families::name_style;
using families::tensor_binder;

/// GLM's attention projections of layer i under binder `b` (GLM-4 and GLM-4.5 alike): q, k, v
/// and o of this rank's q_out and kv_out features, and the q/k/v biases where the model has them.
template <class Binder, class Attention>
void bind_glm_attention(Attention& a, Binder const& b, int i, std::int64_t h, std::int64_t q_out,
                        std::int64_t kv_out, bool bias) {
  using model::tensor_role;
  a.q = b.mat(tensor_role::attn_q, i, q_out, h);
  a.k = b.mat(tensor_role::attn_k, i, kv_out, h);
  a.v = b.mat(tensor_role::attn_v, i, kv_out, h);
  a.o = b.mat(tensor_role::attn_output, i, h, q_out);
  if (bias) {
    a.q_bias = b.vec(tensor_role::attn_q_bias, i, q_out);
    a.k_bias = b.vec(tensor_role::attn_k_bias, i, kv_out);
    a.v_bias = b.vec(tensor_role::attn_v_bias, i, kv_out);
  }
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names. Throws tf::error on a missing tensor or a shape that disagrees
/// with `hp`.
template <class File, class B>
glm4_weights<B> bind_weights(File const& file, glm4_hparams const& hp, name_style style, B& be) {
  if (!attention_hparams_ok(hp))
    throw error(
        "tf: glm4 hparams are inconsistent: heads {} kv_heads {} head_dim {} rope_dims {} "
        "hidden {} layers {} vocab {} ffn {}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.rope_dims, hp.hidden_size, hp.num_layers,
        hp.vocab_size, hp.intermediate_size);
  using model::tensor_role;
  tensor_binder<File, decltype(glm4_tensors), B> const b{file, glm4_tensors, style, "glm4", be};
  glm4_weights<B> w;
  w.hp = per_rank(hp, b.ranks(), "glm4");  // this rank's heads and FFN width
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = w.hp.intermediate_size;
  std::int64_t const q_out = hd * w.hp.num_heads, kv_out = hd * w.hp.num_kv_heads;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  // Tied: the embedding (whole for the lookups; the head may take a rank's rows of it).
  w.output = out ? b.vocab_head(out, hp.vocab_size, h) : b.vocab_split(w.embd);
  w.output_norm = b.vec(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers; ++i) {
    auto& l = w.layers.emplace_back();
    l.attn_norm = b.vec(tensor_role::attn_norm, i, h);
    l.post_attn_norm = b.vec(tensor_role::post_attention_norm, i, h);
    l.ffn_norm = b.vec(tensor_role::ffn_norm, i, h);
    l.post_ffw_norm = b.vec(tensor_role::post_ffw_norm, i, h);
    bind_glm_attention(l.attn, b, i, h, q_out, kv_out, hp.attention_bias);
    if (b.find(tensor_role::ffn_gate, i, true)) {
      l.mlp.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
      l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
    } else {
      l.mlp.gate_up = b.mat_blocks(tensor_role::ffn_up, i, {ff, ff}, h);  // gate rows | up rows
    }
    l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
  }
  return w;
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
glm4_weights<B> load_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_weights(*g, hparams_from_gguf(*g), name_style::gguf, be);
  auto const arch = file.architecture();
  if (arch != "glm4") throw error("tf: expected a glm4 config.json, model_type is '{}'", arch);
  return bind_weights(*file.hf(), hparams_from_config(file.hf()->config()), name_style::hf, be);
}

}  // namespace tf::families::glm
