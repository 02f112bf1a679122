#pragma once
/// The Qwen3 forward, on any backend: pre-norm blocks, attention with per-head q/k RMSNorm and
/// NeoX RoPE, and a SwiGLU MLP.
#include <families/qwen/qwen3_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>

#include <utility>

namespace tf::families::qwen {

template <class B>
class qwen3_model {
 public:
  using hparams = qwen3_hparams;
  using weights = qwen3_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return qwen::read_hparams(file); }
  static weights load(model::model_file const& file, B& be) { return load_weights(file, be); }
  static backend::kv_layout kv_layout(hparams const& hp) {
    return {hp.num_layers, hp.num_kv_heads, hp.head_dim};
  }

  explicit qwen3_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    attn_ = {{hp.num_heads, hp.num_kv_heads, hp.head_dim},
             {backend::rope_kind::neox, 0, hp.rope_theta, 1.0f / hp.rope_scaling_factor},
             hp.rms_norm_eps};
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
      layers::gated_mlp(be, s, L.mlp, backend::activation::silu, o_, xn_, mlp_);
      be.residual(x_, xn_, nullptr, nullptr, eps);
    }
    be.logits(s, x_, w_.output_norm, w_.output, eps, 0.0f, logits);
  }

 private:
  weights w_;
  layers::attention_config attn_;
  typename B::buffer x_, xn_, o_;
  layers::attention_buffers<B> att_;
  layers::mlp_buffers<B> mlp_;
};

}  // namespace tf::families::qwen
