#pragma once
/// The Qwen3.5 forward, on any backend: pre-norm blocks whose mixer is a Gated DeltaNet (conv1d
/// over q|k|v with SiLU, the gated delta rule, a gated RMSNorm per value head) or gated full
/// attention (q/k norms, partial NeoX RoPE, o(attention * sigmoid(gate))), then a SwiGLU MLP or
/// routed experts with a sigmoid-gated shared expert. Qwen3-Next runs it too
/// (qwen3_next_model.hpp).
#include <families/qwen/qwen35_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>

#include <cstddef>
#include <utility>
#include <vector>

namespace tf::families::qwen {

template <class B>
class qwen35_model {
 public:
  using hparams = qwen35_hparams;
  using weights = qwen35_weights<B>;

  static hparams read_hparams(model::model_file const& file) { return read_qwen35_hparams(file); }
  static weights load(model::model_file const& file, B& be) {
    return load_qwen35_weights(file, be);
  }
  /// One rank's heads and widths, as the weights bind them (the memory budget reads it first).
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return qwen35_per_rank(hp, r, "qwen35");
  }
  /// KV pages for the full-attention layers only.
  static backend::kv_layout kv_layout(hparams const& hp) {
    return {hp.count(qwen35_layer::full_attention), hp.num_kv_heads, hp.head_dim};
  }
  /// Per GDN layer: the conv window [K - 1, conv_dim], then the delta state [nv, dk, dv].
  static backend::state_layout state_layout(hparams const& hp) {
    return {hp.count(qwen35_layer::linear_attention), hp.state_floats()};
  }

  explicit qwen35_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    int attention = 0, recurrent = 0;
    for (int i = 0; i < hp.num_layers; ++i)
      index_.push_back(hp.is_full_attention(i) ? attention++ : recurrent++);
    attn_ = {hp.num_heads, hp.num_kv_heads, hp.head_dim, 0.0f, 0, 0.0f};
    rope_ = {backend::rope_kind::neox, hp.rotary_dims, hp.rope_theta, 1.0f};
    delta_ = {hp.linear_num_key_heads,
              hp.linear_num_value_heads,
              hp.linear_key_head_dim,
              hp.linear_value_head_dim,
              hp.tiled_v_heads && hp.linear_num_key_heads != hp.linear_num_value_heads,
              hp.rms_norm_eps};
    routing_ = {backend::routing_kind::softmax_top_k, hp.num_experts, hp.num_experts_per_tok,
                hp.norm_topk_prob, 1.0f};
  }

  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::state_store& states,
               typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    be.embed(s, w_.embd, x_, 1.0f);
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      int const at = index_[static_cast<std::size_t>(l)];
      be.rmsnorm(x_, L.attn_norm, xn_, eps);
      if (hp.is_full_attention(l))
        attention(be, s, kv, at, L.attn, o_);
      else
        delta(be, s, states, at, L.delta, o_);
      be.residual(x_, o_, nullptr, &L.ffn_norm, eps);
      if (hp.is_moe(l))
        layers::moe(be, s, L.moe, routing_, o_, xn_);
      else
        layers::gated_mlp(be, s, L.mlp, backend::activation::silu, o_, xn_, mlp_);
      be.residual(x_, xn_, nullptr, nullptr, eps);
    }
    be.logits(s, x_, w_.output_norm, w_.output, eps, 0.0f, logits);
  }

 private:
  /// out = o(attend(rope(norm(q)), rope(norm(k)), v) * sigmoid(gate)) over xn_; K and V go to
  /// attention layer `layer`'s pages first.
  void attention(B& be, typename B::step const& s, typename B::kv_store& kv, int layer,
                 qwen35_attention_weights<B> const& w, typename B::buffer& out) {
    int const hd = w_.hp.head_dim;
    float const eps = w_.hp.rms_norm_eps;
    be.matmul_group({{w.q, qg_}, {w.k, k_}, {w.v, v_}}, xn_);
    be.columns(qg_, q_, 0, hd, 2 * hd);  // per head [q | gate]
    be.columns(qg_, gate_, hd, hd, 2 * hd);
    be.rmsnorm_heads(q_, w.q_norm, hd, eps);
    be.rmsnorm_heads(k_, w.k_norm, hd, eps);
    be.rope(s, q_, hd, rope_);
    be.rope(s, k_, hd, rope_);
    be.kv_write(s, kv, layer, k_, v_);
    be.attend(s, kv, layer, q_, att_, attn_);
    be.sigmoid_gate(att_, gate_);
    be.matmul(w.o, att_, out);
  }

  /// out = out_proj(gated_norm(delta_rule(silu(conv(qkv xn))), z xn)) for recurrent layer
  /// `layer`, whose conv window and delta state live in each row's slot.
  void delta(B& be, typename B::step const& s, typename B::state_store& states, int layer,
             qwen35_delta_weights<B> const& w, typename B::buffer& out) {
    auto const& hp = w_.hp;
    be.matmul_group({{w.qkv, qkv_}, {w.z, z_}, {w.b, b_}, {w.a, a_}}, xn_);
    be.conv1d(s, states, layer, 0, qkv_, w.conv, nullptr, true);
    be.gated_delta(s, states, layer, hp.conv_state_floats(), qkv_, b_, a_, w.dt_bias, w.a_coef,
                   delta_, y_);
    be.gated_rmsnorm(y_, z_, w.norm, hp.linear_value_head_dim, hp.rms_norm_eps, true);
    be.matmul(w.out, y_, out);
  }

  weights w_;
  std::vector<int> index_;  // a layer's KV layer (attention) or state layer (GDN)
  backend::attention_params attn_;
  backend::rope_params rope_;
  backend::delta_params delta_;
  backend::routing_params routing_;
  typename B::buffer x_, xn_, o_;                   // residual stream, normed input, block output
  typename B::buffer qg_, q_, gate_, k_, v_, att_;  // attention
  typename B::buffer qkv_, z_, b_, a_, y_;          // Gated DeltaNet
  layers::mlp_buffers<B> mlp_;
};

}  // namespace tf::families::qwen
