#pragma once
/// Gemma 3 weights bound from a model file: matrices stay in the file's mapping (any GGUF type,
/// or F32/F16/BF16 safetensors); norms are copied to f32 with the (1 + w) shift applied for HF.
#include <families/common/tensor_binder.hpp>
#include <families/gemma/detail/cpu_ops.hpp>
#include <families/gemma/gemma3.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>

#include <cstdint>
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

using families::name_style;

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`).
/// `style` picks GGUF or HF names; HF norms get (1 + w). Throws tf::error on a missing tensor
/// or a shape that disagrees with `hp`.
template <class File>
gemma3_weights bind_weights(File const& file, gemma3_hparams const& hp, name_style style) {
  if (hp.num_heads <= 0 || hp.num_kv_heads <= 0 || hp.num_heads % hp.num_kv_heads != 0 ||
      hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.hidden_size <= 0 || hp.num_layers <= 0 ||
      hp.vocab_size <= 0 || hp.intermediate_size <= 0)
    throw error(
        "tf: gemma3 hparams are inconsistent: heads {} kv_heads {} head_dim {} hidden {} "
        "layers {} vocab {} ffn {}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.hidden_size, hp.num_layers, hp.vocab_size,
        hp.intermediate_size);
  families::tensor_binder<File, decltype(gemma3_tensors)> const b{file, gemma3_tensors, style,
                                                                  "gemma3"};
  using model::tensor_role;
  auto norm = [&](tensor_role role, int layer, std::int64_t n) {
    auto w = b.norm(role, layer, n);
    if (style == name_style::hf)
      for (auto& x : w) x = 1.0f + x;  // HF stores zero-centred norm weights
    return w;
  };
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  gemma3_weights w;
  w.hp = hp;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  w.output = out ? b.head_of(out, hp.vocab_size, h) : w.embd;  // tied: the embedding
  w.output_norm = norm(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers; ++i) {
    gemma3_layer_weights l;
    l.attn_norm = norm(tensor_role::attn_norm, i, h);
    l.q_norm = norm(tensor_role::attn_q_norm, i, hd);
    l.k_norm = norm(tensor_role::attn_k_norm, i, hd);
    l.post_attn_norm = norm(tensor_role::post_attention_norm, i, h);
    l.ffn_norm = norm(tensor_role::ffn_norm, i, h);
    l.post_ffw_norm = norm(tensor_role::post_ffw_norm, i, h);
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

}  // namespace tf::families::gemma
