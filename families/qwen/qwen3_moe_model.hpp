#pragma once
/// The Qwen3-MoE forward, on any backend: Qwen3's blocks, with the MLP of each MoE layer routed
/// (softmax over the router, top k, optionally renormalised) through SwiGLU experts.
#include <families/qwen/qwen3_moe_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>

#include <utility>

namespace tf::families::qwen {

template <class B>
class qwen3_moe_model {
 public:
  using hparams = qwen3_moe_hparams;
  using weights = qwen3_moe_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return read_moe_hparams(file); }
  static weights load(model::model_file const& file, B& be) { return load_moe_weights(file, be); }
  static backend::kv_layout kv_layout(hparams const& hp) {
    return {hp.num_layers, hp.num_kv_heads, hp.head_dim};
  }

  explicit qwen3_moe_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    attn_ = {{hp.num_heads, hp.num_kv_heads, hp.head_dim},
             {backend::rope_kind::neox, 0, hp.rope_theta, 1.0f / hp.rope_scaling_factor},
             hp.rms_norm_eps};
    routing_ = {backend::routing_kind::softmax_top_k, hp.num_experts, hp.num_experts_per_tok,
                hp.norm_topk_prob, 1.0f};
  }

  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    be.embed(s, w_.embd, x_, 1.0f);
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      be.rmsnorm(x_, L.attn_norm, xn_, eps);
      layers::attention(be, s, kv, l, L.attn, attn_, xn_, o_, att_);
      be.residual(x_, o_, nullptr, &L.ffn_norm, eps);
      if (L.moe.experts.empty())
        layers::gated_mlp(be, s, L.mlp, backend::activation::silu, o_, xn_, mlp_);
      else
        layers::moe(be, s, L.moe, routing_, o_, xn_);
      be.residual(x_, xn_, nullptr, nullptr, eps);
    }
    be.logits(s, x_, w_.output_norm, w_.output, eps, 0.0f, logits);
  }

 private:
  weights w_;
  layers::attention_config attn_;
  backend::routing_params routing_;
  typename B::buffer x_, xn_, o_;
  layers::attention_buffers<B> att_;
  layers::mlp_buffers<B> mlp_;
};

}  // namespace tf::families::qwen
