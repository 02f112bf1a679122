#pragma once
/// GLM-4.5 MoE weights bound from a model file to a backend: matrices as the file holds them (any
/// GGUF type, or F32/F16/BF16 safetensors); norms, biases and the router's correction bias in f32.
/// Experts are sliced from GGUF's stacked ffn_*_exps (or transformers 5's stacked gate_up_proj and
/// down_proj), or bound from HF's per-expert tensors.
#include <families/common/experts.hpp>
#include <families/common/tensor_binder.hpp>
#include <families/glm/glm4_hparams.hpp>
#include <families/glm/glm4_moe_config.hpp>
#include <families/glm/glm4_moe_hparams.hpp>
#include <families/glm/glm4_weights.hpp>
#include <tf/error.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>
#include <tf/model/model_file.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

namespace tf::families::glm {

/// One decoder layer on backend B: a dense SwiGLU MLP (layers before first_k_dense_replace) or a
/// MoE block (router, correction bias, experts and the shared expert).
template <class B>
struct glm4_moe_layer_weights {
  typename B::vector attn_norm, ffn_norm;  // ffn_norm: HF post_attention_layernorm
  layers::attention_weights<B> attn;       // biases and q/k norms empty where the model has none
  layers::mlp_weights<B> mlp;
  layers::moe_weights<B> moe;  // no experts in a dense layer
};

/// All of a GLM-4.5 model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct glm4_moe_weights {
  glm4_moe_hparams hp;
  typename B::matrix embd, output;  // output: the embedding when tied
  typename B::vector output_norm;
  std::vector<glm4_moe_layer_weights<B>> layers;
};

using families::name_style;
using families::tensor_binder;

/// transformers 5's stacked experts, used where a checkpoint has them instead of per-expert ones.
inline constexpr fused_expert_names glm4_moe_fused_experts{
    "model.layers.{}.mlp.experts.gate_up_proj", "model.layers.{}.mlp.experts.down_proj"};

/// Throws unless `hp` describes a GLM-4.5 model tf can run.
inline void check_moe_hparams(glm4_moe_hparams const& hp) {
  if (!attention_hparams_ok(hp) || hp.moe_intermediate_size <= 0 || hp.num_experts <= 0 ||
      hp.experts_per_tok <= 0 || hp.experts_per_tok > hp.num_experts || hp.n_group <= 0 ||
      hp.num_experts % hp.n_group != 0 || hp.topk_group <= 0 || hp.topk_group > hp.n_group ||
      hp.first_k_dense_replace < 0 || hp.num_shared_experts < 0 ||
      hp.experts_per_tok > hp.topk_group * (hp.num_experts / hp.n_group))
    throw error(
        "tf: glm4_moe hparams are inconsistent: heads {} kv_heads {} head_dim {} rope_dims {} "
        "hidden {} layers {} experts {} used {} groups {}/{}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.rope_dims, hp.hidden_size, hp.num_layers,
        hp.num_experts, hp.experts_per_tok, hp.topk_group, hp.n_group);
}

/// `hp` with the heads and widths one rank of `r` holds.
inline glm4_moe_hparams moe_per_rank(glm4_moe_hparams hp, dist::tensor_parallel const& r) {
  auto const whole = hp.moe_intermediate_size;
  hp = per_rank(hp, r, "glm4_moe");  // heads, KV heads, the dense layers' FFN width
  hp.moe_intermediate_size = dist::split_evenly(whole, r.size, "glm4_moe", "expert FFN columns");
  return hp;
}

/// Decoder layer i's weights under binder `b` (a tensor_binder over glm4_moe_tensors); `hp` is
/// this rank's (its heads and widths). The MTP head binds its next-n layer so too.
template <class Binder>
auto bind_moe_layer(Binder const& b, glm4_moe_hparams const& hp, int i) {
  using model::tensor_role;
  using B = std::remove_reference_t<decltype(b.be)>;
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
  std::int64_t const mff = hp.moe_intermediate_size, sff = mff * hp.num_shared_experts;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  glm4_moe_layer_weights<B> l;
  l.attn_norm = b.vec(tensor_role::attn_norm, i, h);
  l.ffn_norm = b.vec(tensor_role::ffn_norm, i, h);
  bind_glm_attention(l.attn, b, i, h, q_out, kv_out, hp.attention_bias);
  if (hp.use_qk_norm) {
    l.attn.q_norm = b.vec(tensor_role::attn_q_norm, i, hd);
    l.attn.k_norm = b.vec(tensor_role::attn_k_norm, i, hd);
  }
  if (i < hp.first_k_dense_replace) {
    l.mlp.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
    l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
    l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
    return l;
  }
  l.moe.router = b.mat(tensor_role::ffn_gate_inp, i, hp.num_experts, h);
  l.moe.router_bias = b.vec(tensor_role::exp_probs_b, i, hp.num_experts);
  if (hp.num_shared_experts > 0)
    l.moe.shared = typename B::expert{b.mat(tensor_role::ffn_gate_shexp, i, sff, h),
                                      b.mat(tensor_role::ffn_up_shexp, i, sff, h),
                                      b.mat(tensor_role::ffn_down_shexp, i, h, sff)};
  l.moe.experts = bind_experts(b, i, hp.num_experts, mff, h, &glm4_moe_fused_experts);
  return l;
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names. Throws tf::error on a missing tensor or a shape that disagrees
/// with `hp`.
template <class File, class B>
glm4_moe_weights<B> bind_moe_weights(File const& file, glm4_moe_hparams const& hp, name_style style,
                                     B& be) {
  check_moe_hparams(hp);
  using model::tensor_role;
  tensor_binder<File, decltype(glm4_moe_tensors), B> const b{file, glm4_moe_tensors, style,
                                                             "glm4_moe", be};
  glm4_moe_weights<B> w;
  w.hp = moe_per_rank(hp, b.ranks());  // this rank's heads, FFN and expert widths
  std::int64_t const h = hp.hidden_size;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  // Tied: the embedding (whole for the lookups; the head may take a rank's rows of it).
  w.output = out ? b.vocab_head(out, hp.vocab_size, h) : b.vocab_split(w.embd);
  w.output_norm = b.vec(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers; ++i) w.layers.push_back(bind_moe_layer(b, w.hp, i));
  return w;
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
glm4_moe_weights<B> load_moe_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_moe_weights(*g, moe_hparams_from_gguf(*g), name_style::gguf, be);
  auto const arch = file.architecture();
  if (arch != "glm4_moe")
    throw error("tf: expected a glm4_moe config.json, model_type is '{}'", arch);
  return bind_moe_weights(*file.hf(), moe_hparams_from_config(file.hf()->config()), name_style::hf,
                          be);
}

}  // namespace tf::families::glm
