#pragma once
/// The attention block, written once for every backend: q/k/v projections (with optional biases
/// and per-head q/k norms), RoPE, the KV write, paged attention and the output projection.
#include <tf/backend/backend.hpp>

namespace tf::layers {

/// One layer's attention weights on backend B; empty vectors mean "none".
template <class B>
struct attention_weights {
  typename B::matrix q, k, v, o;
  typename B::vector q_bias, k_bias, v_bias;
  typename B::vector q_norm, k_norm;  // per-head RMSNorm weights [head_dim]
};

/// What the block does besides the projections.
struct attention_config {
  backend::attention_params attn;  // heads, kv_heads, head_dim, scale, window, softcap
  backend::rope_params rope;
  float norm_eps = 1e-6f;
};

/// The block's activations, kept between calls so a step allocates nothing.
template <class B>
struct attention_buffers {
  typename B::buffer q, k, v, att;
};

/// out = o(attention(rope(norm(q xn)), rope(norm(k xn)), v xn)) for the step's tokens; K and V go
/// into `layer`'s pages first.
template <class B>
void attention(B& be, typename B::step const& s, typename B::kv_store& kv, int layer,
               attention_weights<B> const& w, attention_config const& c,
               typename B::buffer const& xn, typename B::buffer& out, attention_buffers<B>& a) {
  int const hd = c.attn.head_dim;
  be.matmul_group({{w.q, a.q}, {w.k, a.k}, {w.v, a.v}}, xn);
  if (!w.q_bias.empty()) be.add_bias(a.q, w.q_bias);
  if (!w.k_bias.empty()) be.add_bias(a.k, w.k_bias);
  if (!w.v_bias.empty()) be.add_bias(a.v, w.v_bias);
  if (!w.q_norm.empty()) be.rmsnorm_heads(a.q, w.q_norm, hd, c.norm_eps);
  if (!w.k_norm.empty()) be.rmsnorm_heads(a.k, w.k_norm, hd, c.norm_eps);
  be.rope(s, a.q, hd, c.rope);
  be.rope(s, a.k, hd, c.rope);
  be.kv_write(s, kv, layer, a.k, a.v);
  be.attend(s, kv, layer, a.q, a.att, c.attn);
  be.matmul(w.o, a.att, out);
}

}  // namespace tf::layers
