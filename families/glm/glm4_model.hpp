#pragma once
/// The GLM-4 dense forward, on any backend: attention with q/k/v biases and interleaved RoPE on
/// the first rope_dims of each head, sandwich norms around attention and the SwiGLU MLP (gate and
/// up merged or apart).
#include <families/glm/glm4_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/buffers.hpp>
#include <tf/layers/mlp.hpp>

#include <utility>

namespace tf::families::glm {

template <class B>
class glm4_model {
 public:
  using hparams = glm4_hparams;
  using weights = glm4_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return glm::read_hparams(file); }
  /// One rank's heads and widths, as the weights bind them (the memory budget reads it first).
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return per_rank(hp, r, "glm4");
  }
  static weights load(model::model_file const& file, B& be) { return load_weights(file, be); }

  explicit glm4_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    attn_ = {{hp.num_heads, hp.num_kv_heads, hp.head_dim},
             {backend::rope_kind::interleaved, hp.rope_dims, hp.rope_theta, 1.0f},
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
      be.residual(b_.x, b_.o, &L.post_attn_norm, &L.ffn_norm, eps);
      layers::gated_mlp(be, s, L.mlp, backend::activation::silu, b_.o, b_.xn, b_.mlp);
      be.residual(b_.x, b_.xn, &L.post_ffw_norm, nullptr, eps);
    }
    be.logits(s, b_.x, w_.output_norm, w_.output, eps, 0.0f, logits);
  }

 private:
  weights w_;
  layers::attention_config attn_;
  layers::decoder_buffers<B> b_;
};

}  // namespace tf::families::glm
