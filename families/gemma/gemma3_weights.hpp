#pragma once
/// Gemma 3 weights bound from a model file to a backend: matrices as the file holds them (any GGUF
/// type, or F32/F16/BF16 safetensors); norms in f32 with the (1 + w) shift applied for HF.
#include <families/common/tensor_binder.hpp>
#include <families/gemma/gemma3_config.hpp>
#include <families/gemma/gemma3_hparams.hpp>
#include <tf/error.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/model/model_file.hpp>

#include <vector>

namespace tf::families::gemma {

/// One decoder layer's weights on backend B.
template <class B>
struct gemma3_layer_weights {
  typename B::vector attn_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  layers::attention_weights<B> attn;
  layers::mlp_weights<B> mlp;
};

/// All of a Gemma 3 model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct gemma3_weights {
  gemma3_hparams hp;
  typename B::matrix embd;    // [vocab, hidden]
  typename B::matrix output;  // [vocab, hidden]; the embedding when tied
  typename B::vector output_norm;
  std::vector<gemma3_layer_weights<B>> layers;
};

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names. Throws tf::error on a missing tensor or a shape that disagrees
/// with `hp`.
template <class File, class B>
gemma3_weights<B> bind_weights(File const& file, gemma3_hparams const& hp, name_style style,
                               B& be) {
  if (hp.num_heads <= 0 || hp.num_kv_heads <= 0 || hp.num_heads % hp.num_kv_heads != 0 ||
      hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.hidden_size <= 0 || hp.num_layers <= 0 ||
      hp.vocab_size <= 0 || hp.intermediate_size <= 0)
    throw error(
        "tf: gemma3 hparams are inconsistent: heads {} kv_heads {} head_dim {} hidden {} "
        "layers {} vocab {} ffn {}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.hidden_size, hp.num_layers, hp.vocab_size,
        hp.intermediate_size);
  tensor_binder<File, decltype(gemma3_tensors), B> const b{file, gemma3_tensors, style, "gemma3",
                                                           be};
  using model::tensor_role;
  float const shift = style == name_style::hf ? 1.0f : 0.0f;  // HF norms are zero-centred
  gemma3_weights<B> w;
  w.hp = per_rank(hp, b.ranks(), "gemma3");  // this rank's heads and FFN width
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = w.hp.intermediate_size;
  std::int64_t const q_out = hd * w.hp.num_heads, kv_out = hd * w.hp.num_kv_heads;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  // Tied: the embedding (whole for the lookups; the head may take a rank's rows of it).
  w.output = out ? b.vocab_head(out, hp.vocab_size, h) : b.vocab_split(w.embd);
  w.output_norm = b.norm(tensor_role::output_norm, 0, h, shift);
  for (int i = 0; i < hp.num_layers; ++i) {
    auto& l = w.layers.emplace_back();
    l.attn_norm = b.norm(tensor_role::attn_norm, i, h, shift);
    l.post_attn_norm = b.norm(tensor_role::post_attention_norm, i, h, shift);
    l.ffn_norm = b.norm(tensor_role::ffn_norm, i, h, shift);
    l.post_ffw_norm = b.norm(tensor_role::post_ffw_norm, i, h, shift);
    l.attn.q_norm = b.norm(tensor_role::attn_q_norm, i, hd, shift);
    l.attn.k_norm = b.norm(tensor_role::attn_k_norm, i, hd, shift);
    l.attn.q = b.mat(tensor_role::attn_q, i, q_out, h);
    l.attn.k = b.mat(tensor_role::attn_k, i, kv_out, h);
    l.attn.v = b.mat(tensor_role::attn_v, i, kv_out, h);
    l.attn.o = b.mat(tensor_role::attn_output, i, h, q_out);
    l.mlp.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
    l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
    l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
  }
  return w;
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
gemma3_weights<B> load_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_weights(*g, hparams_from_gguf(*g), name_style::gguf, be);
  auto const arch = file.architecture();
  if (arch != "gemma3_text" && arch != "gemma3")
    throw error("tf: expected a gemma3_text config.json, model_type is '{}'", arch);
  return bind_weights(*file.hf(), hparams_from_config(file.hf()->config()), name_style::hf, be);
}

}  // namespace tf::families::gemma
