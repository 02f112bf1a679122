#pragma once
/// The GLM-4.5 MoE forward, on any backend: pre-norm blocks; attention with q/k/v biases, optional
/// per-head q/k norms and NeoX RoPE on the first rope_dims of each head; a SwiGLU MLP in the
/// leading dense layers, then MoE layers (sigmoid routing with a correction bias over the best
/// groups, plus the shared expert).
#include <families/glm/glm4_moe_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/buffers.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>

#include <utility>

namespace tf::families::glm {

template <class B>
class glm4_moe_model {
 public:
  using hparams = glm4_moe_hparams;
  using weights = glm4_moe_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return read_moe_hparams(file); }
  /// One rank's heads and widths, as the weights bind them (the memory budget reads it first).
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return moe_per_rank(hp, r);
  }
  static weights load(model::model_file const& file, B& be) { return load_moe_weights(file, be); }

  explicit glm4_moe_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    attn_ = {{hp.num_heads, hp.num_kv_heads, hp.head_dim},
             {backend::rope_kind::neox, hp.rope_dims, hp.rope_theta, 1.0f},
             hp.rms_norm_eps};
    routing_ = {backend::routing_kind::sigmoid_groups,
                hp.num_experts,
                hp.experts_per_tok,
                hp.norm_topk_prob,
                hp.routed_scaling_factor,
                hp.n_group,
                hp.topk_group};
  }

  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    be.embed(s, w_.embd, b_.x, 1.0f);
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      be.rmsnorm(b_.x, L.attn_norm, b_.xn, eps);
      layers::attention(be, s, kv, l, L.attn, attn_, b_.xn, b_.o, b_.att);
      be.residual(b_.x, b_.o, nullptr, &L.ffn_norm, eps);
      if (L.moe.experts.empty())
        layers::gated_mlp(be, s, L.mlp, backend::activation::silu, b_.o, b_.xn, b_.mlp);
      else
        layers::moe(be, s, L.moe, routing_, b_.o, b_.xn);
      be.residual(b_.x, b_.xn, nullptr, nullptr, eps);
    }
    be.logits(s, b_.x, w_.output_norm, w_.output, eps, 0.0f, logits);
  }

 private:
  weights w_;
  layers::attention_config attn_;
  backend::routing_params routing_;
  layers::decoder_buffers<B> b_;
};

}  // namespace tf::families::glm
