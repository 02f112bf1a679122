#pragma once
/// The mixture-of-experts block, written once for every backend: the router, the family's routing
/// and the chosen experts (SwiGLU), plus a shared expert where the family has one.
#include <tf/backend/backend.hpp>

#include <optional>
#include <vector>

namespace tf::layers {

/// One MoE layer's weights: router [experts, hidden], an optional correction bias [experts] for
/// sigmoid routing, the experts, an optional shared expert and its optional gate [1, hidden].
template <class B>
struct moe_weights {
  typename B::matrix router;
  typename B::vector router_bias;
  std::vector<typename B::expert> experts;
  std::optional<typename B::expert> shared;
  std::optional<typename B::matrix> shared_gate;
  std::optional<typename B::matrix> latent_down, latent_up;  // [latent, hidden], [hidden, latent]
};

/// out = sum over the token's picks of weight * expert(xn) (+ shared(xn), times
/// sigmoid(shared_gate xn) when it has one); with latent projections the experts run on
/// latent_down xn and their sum goes through latent_up.
template <class B>
void moe(B& be, typename B::step const& s, moe_weights<B> const& w,
         backend::routing_params const& r, typename B::buffer const& xn, typename B::buffer& out) {
  be.moe(s, r, w.router, w.router_bias, w.experts, w.shared ? &*w.shared : nullptr,
         w.shared_gate ? &*w.shared_gate : nullptr, xn, out,
         w.latent_down ? &*w.latent_down : nullptr, w.latent_up ? &*w.latent_up : nullptr);
}

}  // namespace tf::layers
