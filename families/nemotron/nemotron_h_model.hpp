#pragma once
/// The Nemotron-H forward, on any backend: every block is x + mixer(rmsnorm(x)), the mixer one of
/// a Mamba2 layer (its conv window and SSM state in the stream's state slot), attention without
/// positions (no RoPE), a relu² MLP, or a MoE of relu² experts with sigmoid routing and an
/// ungated shared expert.
#include <families/nemotron/nemotron_h_weights.hpp>
#include <tf/backend/backend.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/buffers.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>

#include <utility>

namespace tf::families::nemotron {

template <class B>
class nemotron_h_model {
 public:
  using hparams = nemotron_h_hparams;
  using weights = nemotron_h_weights<B>;

  static hparams read_hparams(model::model_file const& file) {
    return nemotron::read_hparams(file);
  }
  static weights load(model::model_file const& file, B& be) { return load_weights(file, be); }

  /// One rank's heads and widths, as the weights bind them (the memory budget reads it first).
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return nemotron::per_rank(hp, r);
  }
  /// KV for the attention layers only; attention layer i is KV layer (its rank among them).
  static backend::kv_layout kv_layout(hparams const& hp) {
    return {hp.count(block_kind::attention), hp.num_kv_heads, hp.head_dim};
  }
  /// One state per Mamba2 layer: the conv window, then the SSM state.
  static backend::state_layout state_layout(hparams const& hp) {
    return {hp.count(block_kind::mamba), hp.conv_floats() + hp.ssm_floats()};
  }

  explicit nemotron_h_model(weights w) : w_(std::move(w)) {
    auto const& hp = w_.hp;
    attn_ = {{hp.num_heads, hp.num_kv_heads, hp.head_dim},
             {backend::rope_kind::none},
             hp.layer_norm_epsilon};
    ssm_ = {hp.mamba_num_heads, hp.mamba_head_dim, hp.mamba_n_groups,
            hp.ssm_state_size,  hp.dt_min,         hp.dt_max};
    routing_ = {backend::routing_kind::sigmoid_groups,
                hp.n_routed_experts,
                hp.num_experts_per_tok,
                hp.norm_topk_prob,
                hp.routed_scaling_factor,
                hp.n_group,
                hp.topk_group,
                backend::activation::relu2};
  }

  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::state_store& states,
               typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    float const eps = hp.layer_norm_epsilon;
    be.embed(s, w_.embd, b_.x, 1.0f);
    int attn_layer = 0, rec_layer = 0;
    for (auto const& L : w_.layers) {
      be.rmsnorm(b_.x, L.norm, b_.xn, eps);
      switch (L.kind) {
        case block_kind::mamba:
          mamba(be, s, states, rec_layer++, L.mamba);
          break;
        case block_kind::attention:
          layers::attention(be, s, kv, attn_layer++, L.attn, attn_, b_.xn, b_.o, b_.att);
          if (!L.attn_out_bias.empty()) be.add_bias(b_.o, L.attn_out_bias);
          break;
        case block_kind::mlp:
          be.matmul(L.mlp.up, b_.xn, b_.mlp.u);
          if (!L.up_bias.empty()) be.add_bias(b_.mlp.u, L.up_bias);
          be.activate(s, backend::activation::relu2, b_.mlp.u);
          be.matmul(L.mlp.down, b_.mlp.u, b_.o);
          if (!L.down_bias.empty()) be.add_bias(b_.o, L.down_bias);
          break;
        case block_kind::moe:
          layers::moe(be, s, L.moe, routing_, b_.xn, b_.o);
          break;
      }
      be.residual(b_.x, b_.o, nullptr, nullptr, eps);
    }
    be.logits(s, b_.x, w_.output_norm, w_.output, eps, 0.0f, logits);
  }

 private:
  /// The Mamba2 mixer of recurrent layer `rec` over b_.xn into b_.o.
  void mamba(B& be, typename B::step const& s, typename B::state_store& states, int rec,
             mamba_weights<B> const& m) {
    auto const& hp = w_.hp;
    std::int64_t const inner = hp.d_inner(), conv = hp.conv_dim();
    be.matmul(m.in, b_.xn, proj_);
    if (!m.in_bias.empty()) be.add_bias(proj_, m.in_bias);
    be.columns(proj_, z_, 0, inner, 0);
    be.columns(proj_, xbc_, inner, conv, 0);
    be.columns(proj_, dt_, inner + conv, hp.mamba_num_heads, 0);
    be.conv1d(s, states, rec, 0, xbc_, m.conv, m.conv_bias.empty() ? nullptr : &m.conv_bias, true);
    be.ssm_scan(s, states, rec, hp.conv_floats(), xbc_, dt_, m.dt_bias, m.a, m.d, ssm_, y_);
    be.gated_rmsnorm(y_, z_, m.norm, static_cast<int>(inner / hp.mamba_n_groups),
                     hp.layer_norm_epsilon, false);
    be.matmul(m.out, y_, b_.o);
    if (!m.out_bias.empty()) be.add_bias(b_.o, m.out_bias);
  }

  weights w_;
  layers::attention_config attn_;
  backend::ssm_params ssm_;
  backend::routing_params routing_;
  layers::decoder_buffers<B> b_;
  typename B::buffer proj_, z_, xbc_, dt_, y_;
};

}  // namespace tf::families::nemotron
