#pragma once
/// The Gemma 4 forward, on any backend: sandwich norms around attention and a GeGLU MLP; sliding
/// layers with NeoX RoPE over their head_dim, full layers with their own head_dim and KV heads and
/// proportional RoPE (a fraction of the pairs turn, frequencies over the whole head); q/k norms
/// with weights, V's without; attention scale 1; K=V full layers; the last layers reading an
/// earlier layer's KV; a MoE block beside the MLP; per-layer embeddings (E models) added after
/// each MLP; each layer's output
/// times its layer_scalar; the head's soft-cap.
#include <families/gemma/gemma4_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/buffers.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>

#include <cmath>
#include <utility>

namespace tf::families::gemma {

template <class B>
class gemma4_model {
 public:
  using hparams = gemma4_hparams;
  using weights = gemma4_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return read_gemma4_hparams(file); }
  /// One rank's heads and widths, as the weights bind them (the memory budget reads it first).
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return gemma4_per_rank(hp, r);
  }
  static weights load(model::model_file const& file, B& be) {
    return load_gemma4_weights(file, be);
  }
  static backend::kv_layout kv_layout(hparams const& hp) { return hp.kv_layout(); }

  explicit gemma4_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    routing_.kind = backend::routing_kind::softmax_top_k;
    routing_.experts = hp.num_experts;
    routing_.k = hp.top_k_experts;
    routing_.act = backend::activation::gelu_tanh;
    local_ = {{hp.num_heads, hp.num_kv_heads, hp.head_dim, 1.0f, hp.sliding_window, 0.0f},
              {backend::rope_kind::neox, 0, hp.rope_theta_local, 1.0f, 0},
              hp.rms_norm_eps};
    // Proportional RoPE: the first partial * head_dim / 2 pairs turn, at frequencies over the
    // whole head; the other pairs keep their values.
    int const pairs = static_cast<int>(hp.partial_rotary_factor * hp.global_head_dim / 2);
    global_ = {{hp.num_heads, hp.num_global_kv_heads, hp.global_head_dim, 1.0f, 0, 0.0f},
               {pairs > 0 ? backend::rope_kind::neox : backend::rope_kind::none, 0,
                hp.rope_theta_global, 1.0f / hp.rope_scaling_factor, pairs},
               hp.rms_norm_eps};
  }

  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    be.embed(s, w_.embd, b_.x, std::sqrt(static_cast<float>(hp.hidden_size)));
    if (hp.ple_dim > 0) per_layer_inputs(be, s);
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      be.rmsnorm(b_.x, L.attn_norm, b_.xn, eps);
      attention(be, s, kv, l, L, hp.is_sliding(l) ? local_ : global_);
      be.residual(b_.x, b_.o, &L.post_attn_norm, &L.ffn_norm, eps);
      layers::gated_mlp(be, s, L.mlp, backend::activation::gelu_tanh, b_.o, b_.xn, b_.mlp);
      if (hp.moe) {
        // m = post_norm_1(mlp) + post_norm_2(experts(pre_norm_2(x))), routed on x.
        be.rmsnorm(b_.xn, L.post_norm_1, moe_a_, eps);
        be.rmsnorm(b_.x, L.pre_norm_2, moe_in_, eps);
        auto routing = routing_;
        routing.expert_scale = L.expert_scale;
        layers::moe(be, s, L.moe, routing, moe_in_, moe_b_);
        be.rmsnorm(moe_b_, L.post_norm_2, b_.xn, eps);
        be.add(b_.xn, moe_a_);
      }
      be.residual(b_.x, b_.xn, &L.post_ffw_norm, nullptr, eps);
      if (hp.ple_dim > 0) {
        // x += post_norm(up(gelu(gate x) * this layer's slice of the per-layer inputs)).
        be.matmul(L.ple_gate, b_.x, b_.mlp.g);
        be.columns(ple_in_, b_.mlp.u, std::int64_t{l} * hp.ple_dim, hp.ple_dim, 0);
        be.glu(s, backend::activation::gelu_tanh, b_.mlp.g, b_.mlp.u);
        be.matmul(L.ple_up, b_.mlp.g, b_.o);
        be.residual(b_.x, b_.o, &L.ple_post_norm, nullptr, eps);
      }
      if (L.layer_scalar != 1.0f) be.scale(b_.x, L.layer_scalar);
    }
    be.logits(s, b_.x, w_.output_norm, w_.output, eps, hp.final_logit_softcap, logits);
  }

 private:
  // ple_in_ [n, layers * ple] = (rmsnorm_per_layer(proj(x) / sqrt(hidden)) + ple_embd(token) *
  // sqrt(ple)) / sqrt(2), from the scaled main embedding in b_.x.
  void per_layer_inputs(B& be, typename B::step const& s) {
    auto const& hp = w_.hp;
    be.embed(s, w_.ple_embd, ple_tok_, std::sqrt(static_cast<float>(hp.ple_dim)));
    be.matmul(w_.ple_proj, b_.x, ple_in_);
    be.scale(ple_in_, 1.0f / std::sqrt(static_cast<float>(hp.hidden_size)));
    be.rmsnorm_heads(ple_in_, w_.ple_proj_norm, hp.ple_dim, hp.rms_norm_eps);
    be.add(ple_in_, ple_tok_);
    be.scale(ple_in_, 1.0f / std::sqrt(2.0f));
  }

  // b_.o = o(attention(q, K, V)) of b_.xn; a KV-shared layer writes no KV and reads its source's.
  void attention(B& be, typename B::step const& s, typename B::kv_store& kv, int l,
                 gemma4_layer_weights<B> const& L, layers::attention_config const& c) {
    auto& a = b_.att;
    int const hd = c.attn.head_dim;
    if (L.attn.k.empty()) {
      be.matmul(L.attn.q, b_.xn, a.q);
    } else {
      if (L.attn.v.empty()) {
        be.matmul_group({{L.attn.q, a.q}, {L.attn.k, a.k}}, b_.xn);
        be.columns(a.k, a.v, 0, a.k.cols, 0);  // K=V: V is k_proj's output before k_norm
      } else {
        be.matmul_group({{L.attn.q, a.q}, {L.attn.k, a.k}, {L.attn.v, a.v}}, b_.xn);
      }
      be.rmsnorm_heads(a.k, L.attn.k_norm, hd, c.norm_eps);
      be.rmsnorm_heads(a.v, L.v_norm, hd, c.norm_eps);
      be.rope(s, a.k, hd, c.rope);
      be.kv_write(s, kv, l, a.k, a.v);
    }
    be.rmsnorm_heads(a.q, L.attn.q_norm, hd, c.norm_eps);
    be.rope(s, a.q, hd, c.rope);
    be.attend(s, kv, l, a.q, a.att, c.attn);
    be.matmul(L.attn.o, a.att, b_.o);
  }

  weights w_;
  layers::attention_config global_, local_;
  layers::decoder_buffers<B> b_;
  typename B::buffer ple_in_, ple_tok_;
  backend::routing_params routing_;
  typename B::buffer moe_a_, moe_in_, moe_b_;
};

}  // namespace tf::families::gemma
