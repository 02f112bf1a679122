#pragma once
/// GLM-4 dense weights bound from a model file: matrices stay in the file's mapping (any GGUF
/// type, or F32/F16/BF16 safetensors); norms and biases are copied to f32.
#include <families/common/tensor_binder.hpp>
#include <families/glm/detail/cpu_ops.hpp>
#include <families/glm/glm4.hpp>
#include <tf/error.hpp>

#include <cstdint>
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

using families::name_style;

/// Whether the attention and dense shapes of `hp` (GLM-4's or GLM-4.5's) describe a model.
template <class HParams>
bool attention_hparams_ok(HParams const& hp) {
  return hp.num_heads > 0 && hp.num_kv_heads > 0 && hp.num_heads % hp.num_kv_heads == 0 &&
         hp.head_dim > 0 && hp.rope_dims >= 0 && hp.rope_dims <= hp.head_dim &&
         hp.rope_dims % 2 == 0 && hp.hidden_size > 0 && hp.num_layers > 0 && hp.vocab_size > 0 &&
         hp.intermediate_size > 0;
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`).
/// Throws tf::error on a missing tensor or a shape that disagrees with `hp`.
template <class File>
glm4_weights bind_weights(File const& file, glm4_hparams const& hp, name_style style) {
  if (!attention_hparams_ok(hp))
    throw error(
        "tf: glm4 hparams are inconsistent: heads {} kv_heads {} head_dim {} rope_dims {} "
        "hidden {} layers {} vocab {} ffn {}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.rope_dims, hp.hidden_size, hp.num_layers,
        hp.vocab_size, hp.intermediate_size);
  using model::tensor_role;
  tensor_binder<File, decltype(glm4_tensors)> b{file, glm4_tensors, style, "glm4"};
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  glm4_weights w;
  w.hp = hp;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  w.output = out ? b.head_of(out, hp.vocab_size, h) : w.embd;  // tied: the embedding
  w.output_norm = b.vec(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers; ++i) {
    glm4_layer_weights l;
    l.attn_norm = b.vec(tensor_role::attn_norm, i, h);
    l.post_attn_norm = b.vec(tensor_role::post_attention_norm, i, h);
    l.ffn_norm = b.vec(tensor_role::ffn_norm, i, h);
    l.post_ffw_norm = b.vec(tensor_role::post_ffw_norm, i, h);
    l.q = b.mat(tensor_role::attn_q, i, q_out, h);
    l.k = b.mat(tensor_role::attn_k, i, kv_out, h);
    l.v = b.mat(tensor_role::attn_v, i, kv_out, h);
    if (hp.attention_bias) {
      l.q_bias = b.vec(tensor_role::attn_q_bias, i, q_out);
      l.k_bias = b.vec(tensor_role::attn_k_bias, i, kv_out);
      l.v_bias = b.vec(tensor_role::attn_v_bias, i, kv_out);
    }
    l.o = b.mat(tensor_role::attn_output, i, h, q_out);
    if (b.find(tensor_role::ffn_gate, i, true)) {
      l.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
      l.up = b.mat(tensor_role::ffn_up, i, ff, h);
    } else {
      l.gate_up = b.mat(tensor_role::ffn_up, i, 2 * ff, h);
    }
    l.down = b.mat(tensor_role::ffn_down, i, h, ff);
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace tf::families::glm
