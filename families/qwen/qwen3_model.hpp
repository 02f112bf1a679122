#pragma once
/// The Qwen3 forward, on any backend: pre-norm blocks, attention with per-head q/k RMSNorm and
/// NeoX RoPE, and a SwiGLU MLP.
#include <families/qwen/qwen3_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/buffers.hpp>
#include <tf/layers/mlp.hpp>

#include <utility>

namespace tf::families::qwen {

template <class B>
class qwen3_model {
 public:
  using hparams = qwen3_hparams;
  using weights = qwen3_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return qwen::read_hparams(file); }
  /// One rank's heads and widths, as the weights bind them (the memory budget reads it first).
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return per_rank(hp, r, "qwen3");
  }
  static weights load(model::model_file const& file, B& be) { return load_weights(file, be); }

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
    be.embed(s, w_.embd, b_.x, 1.0f);
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      be.rmsnorm(b_.x, L.attn_norm, b_.xn, eps);
      layers::attention(be, s, kv, l, L.attn, attn_, b_.xn, b_.o, b_.att);
      be.residual(b_.x, b_.o, nullptr, &L.ffn_norm, eps);
      layers::gated_mlp(be, s, L.mlp, backend::activation::silu, b_.o, b_.xn, b_.mlp);
      be.residual(b_.x, b_.xn, nullptr, nullptr, eps);
    }
    be.logits(s, b_.x, w_.output_norm, w_.output, eps, 0.0f, logits);
  }

 private:
  weights w_;
  layers::attention_config attn_;
  layers::decoder_buffers<B> b_;
};

}  // namespace tf::families::qwen
