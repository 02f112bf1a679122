#pragma once
/// What a backend may offer beyond the core concept (backend.hpp), and what a family needs of it.
/// A backend states its capabilities by modelling these concepts; a family lists the ones its
/// forward uses in `using backend_needs = tf::backend::needs<...>;` (none: the core is enough).
/// tf::engine<Family, Backend> refuses, at compile time, a backend that lacks a listed capability,
/// naming the family, the backend and the capability; the registry refuses it when a model of
/// that family is opened on that backend.
#include <tf/backend/backend.hpp>
#include <tf/backend/device_sampling.hpp>

#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>

namespace tf::backend {

// clang-format off
/// The recurrent layers' operations (Mamba2, Gated DeltaNet) over the state store's slots.
template <class B>
concept recurrent_ops = backend<B> &&
    requires(B& be, typename B::step const& s, typename B::buffer& x,
             typename B::buffer const& cx, typename B::vector const& v,
             typename B::state_store& st) {
  be.gated_rmsnorm(x, cx, v, 1, 1e-6f, true);
  be.conv1d(s, st, 0, std::int64_t{}, x, v, &v, true);
  be.ssm_scan(s, st, 0, std::int64_t{}, cx, cx, v, v, v, ssm_params{}, x);
  be.gated_delta(s, st, 0, std::int64_t{}, cx, cx, cx, v, v, delta_params{}, x);
};

/// A mixture-of-experts layer: routing, the picked experts and a shared expert in one call.
template <class B>
concept expert_ops = backend<B> &&
    requires(B& be, typename B::step const& s, typename B::buffer& x,
             typename B::buffer const& cx, typename B::matrix const& w,
             typename B::vector const& v, std::span<typename B::expert const> experts) {
  be.moe(s, routing_params{}, w, v, experts, nullptr, nullptr, cx, x);
};

/// Weights split over ranks: the backend knows its ranks and all-reduces a split matmul's sums.
template <class B>
concept split_weight_ops = backend<B> && requires(B const& be) {
  { be.ranks().rank } -> std::convertible_to<int>;
  { be.ranks().size } -> std::convertible_to<int>;
};
// clang-format on

/// The capabilities' names, for `needs<...>`.
struct recurrent_layers {
  static constexpr std::string_view name =
      "recurrent layers (gated_rmsnorm, conv1d, ssm_scan, "
      "gated_delta)";
};
struct routed_experts {
  static constexpr std::string_view name = "routed experts (moe)";
};
struct split_weights {
  static constexpr std::string_view name = "split weights (ranks, all-reduce)";
};
struct sampling_on_device {
  static constexpr std::string_view name = "sampling on the device (sample_rows)";
};

/// Whether backend B offers capability C.
template <class B, class C>
inline constexpr bool offers = false;
template <class B>
inline constexpr bool offers<B, recurrent_layers> = recurrent_ops<B>;
template <class B>
inline constexpr bool offers<B, routed_experts> = expert_ops<B>;
template <class B>
inline constexpr bool offers<B, split_weights> = split_weight_ops<B>;
template <class B>
inline constexpr bool offers<B, sampling_on_device> = device_sampling<B>;

/// A family's list of the capabilities its forward uses.
template <class... C>
struct needs {};

namespace detail {
template <class F>
struct needs_of {
  using type = needs<>;
};
template <class F>
requires requires {
  typename F::backend_needs;
}
struct needs_of<F> {
  using type = typename F::backend_needs;
};

template <class B, class N>
struct offers_all_of;
template <class B, class... C>
struct offers_all_of<B, needs<C...>> {
  static constexpr bool value = (offers<B, C> && ...);
};

template <class B, class N>
struct first_missing_of;
template <class B>
struct first_missing_of<B, needs<>> {
  static constexpr std::string_view name = {};
};
template <class B, class C, class... Rest>
struct first_missing_of<B, needs<C, Rest...>> {
  static constexpr std::string_view name =
      offers<B, C> ? first_missing_of<B, needs<Rest...>>::name : C::name;
};

/// One check per needed capability, so the compiler's note names the family, the backend and
/// the capability that is missing.
template <class Family, class Backend, class Capability>
struct capability_check {
  static_assert(offers<Backend, Capability>,
                "tf: this family's forward needs a capability this backend does not offer "
                "(the instantiation names the family, the backend and the capability). Model "
                "the capability's concept in the backend (include/tf/backend/capabilities.hpp), "
                "or open the family on a backend that offers it.");
  static constexpr bool ok = true;
};
template <class Family, class Backend, class N>
struct needs_check;
template <class Family, class Backend, class... C>
struct needs_check<Family, Backend, needs<C...>> {
  static constexpr bool ok = (capability_check<Family, Backend, C>::ok && ...);
};
}  // namespace detail

/// The capabilities family F lists (`needs<>` when it lists none).
template <class F>
using needs_of = typename detail::needs_of<F>::type;

/// Backend B offers every capability family F needs.
template <class F, class B>
inline constexpr bool offers_needs = detail::offers_all_of<B, needs_of<F>>::value;

/// The name of the first capability family F needs that backend B lacks (empty when none).
template <class F, class B>
inline constexpr std::string_view missing_capability =
    detail::first_missing_of<B, needs_of<F>>::name;

/// Fails to compile, naming the family, the backend and the capability, unless B offers what F
/// needs.
template <class F, class B>
inline constexpr bool check_needs = detail::needs_check<F, B, needs_of<F>>::ok;

}  // namespace tf::backend
