#pragma once
/// The Gemma 3 forward, on any backend: sandwich norms around attention (sliding-window layers
/// with local RoPE, every sliding_window_pattern-th layer global) and a GeGLU MLP.
#include <families/gemma/gemma3_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/buffers.hpp>
#include <tf/layers/mlp.hpp>

#include <cmath>
#include <utility>

namespace tf::families::gemma {

template <class B>
class gemma3_model {
 public:
  using hparams = gemma3_hparams;
  using weights = gemma3_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return gemma::read_hparams(file); }
  /// One rank's heads and widths, as the weights bind them (the memory budget reads it first).
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return per_rank(hp, r, "gemma3");
  }
  static weights load(model::model_file const& file, B& be) { return load_weights(file, be); }

  explicit gemma3_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    backend::attention_params const a{
        hp.num_heads, hp.num_kv_heads, hp.head_dim, 1.0f / std::sqrt(hp.query_pre_attn_scalar), 0,
        0.0f};
    global_ = {a,
               {backend::rope_kind::neox, 0, hp.rope_theta_global, 1.0f / hp.rope_scaling_factor},
               hp.rms_norm_eps};
    local_ = {a, {backend::rope_kind::neox, 0, hp.rope_theta_local, 1.0f}, hp.rms_norm_eps};
    local_.attn.window = hp.sliding_window;
  }

  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    be.embed(s, w_.embd, b_.x, std::sqrt(static_cast<float>(hp.hidden_size)));
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      be.rmsnorm(b_.x, L.attn_norm, b_.xn, eps);
      layers::attention(be, s, kv, l, L.attn, hp.is_sliding(l) ? local_ : global_, b_.xn, b_.o,
                        b_.att);
      be.residual(b_.x, b_.o, &L.post_attn_norm, &L.ffn_norm, eps);
      layers::gated_mlp(be, s, L.mlp, backend::activation::gelu_tanh, b_.o, b_.xn, b_.mlp);
      be.residual(b_.x, b_.xn, &L.post_ffw_norm, nullptr, eps);
    }
    be.logits(s, b_.x, w_.output_norm, w_.output, eps, hp.final_logit_softcap, logits);
  }

 private:
  weights w_;
  layers::attention_config global_, local_;
  layers::decoder_buffers<B> b_;
};

}  // namespace tf::families::gemma
