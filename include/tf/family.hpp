#pragma once
/// The family contract: how a traits struct binds its KV pool to the ledger, checked at compile
/// time.
#include <tf/kv/fwd.hpp>

#include <concepts>
#include <string_view>
#include <type_traits>

namespace tf {

/// The family uses the engine's paged pool; the lane host counts that pool in the ledger directly.
template <class Pool>
struct kvPool {
  using pool_type = Pool;
};

/// The family brings its own pool type, counted by the ledger through its ledger-countable concept.
template <class Pool>
struct ledgerPool {
  using pool_type = Pool;
};

namespace detail {
template <class T>
inline constexpr bool is_kv_pool_binding = false;
template <class P>
inline constexpr bool is_kv_pool_binding<kvPool<P>> = true;
template <class T>
inline constexpr bool is_ledger_pool_binding = false;
template <class P>
inline constexpr bool is_ledger_pool_binding<ledgerPool<P>> = true;
}  // namespace detail

// clang-format 14 breaks a requires-expression joined with &&.
// clang-format off
/// F declares `using kv_pool = tf::kvPool<...>;`.
template <class F>
concept binds_kv_pool = requires { typename F::kv_pool; } &&
                        detail::is_kv_pool_binding<typename F::kv_pool>;

/// F declares `using ledger_pool = tf::ledgerPool<...>;`.
template <class F>
concept binds_ledger_pool = requires { typename F::ledger_pool; } &&
                            detail::is_ledger_pool_binding<typename F::ledger_pool>;
// clang-format on

/// F names its architectures and says whether per-request admission applies to it.
template <class F>
concept names_architectures = requires {
  { F::name } -> std::convertible_to<std::string_view>;
  F::arch_names.size();
  { F::per_request_admission } -> std::convertible_to<bool>;
  typename F::hparams;
};

/// F has a forward on backend B: its traits declare `template <class B> using model = ...;` (a
/// family's forward is written once, for every backend).
template <class F, class B>
concept has_forward = requires {
  typename F::template model<B>;
};

/// The chat template a family brings for model files that carry none: its traits'
/// `static constexpr std::string_view builtin_chat_template`, else empty (chat is refused).
template <class F>
constexpr std::string_view builtin_chat_template() {
  if constexpr (requires { F::builtin_chat_template; })
    return std::string_view(F::builtin_chat_template);
  else
    return {};
}

/// Instantiated once per registry line, so the compiler names the family on the failing line.
template <class F>
struct family_check {
  static_assert(binds_kv_pool<F> || binds_ledger_pool<F>,
                "tf: this family binds no KV pool to the ledger. Declare exactly one of "
                "`using kv_pool = tf::kvPool<tf::kv::paged_pool>;` (the engine's paged pool) or "
                "`using ledger_pool = tf::ledgerPool<YourPool>;` (a pool the ledger counts).");
  static_assert(!(binds_kv_pool<F> && binds_ledger_pool<F>),
                "tf: this family binds its KV pool twice. Declare exactly one of `kv_pool` "
                "(tf::kvPool) or `ledger_pool` (tf::ledgerPool), not both.");
  static_assert(names_architectures<F>,
                "tf: this family is missing a member. Declare `static constexpr std::string_view "
                "name`, `static constexpr std::array<std::string_view, N> arch_names`, "
                "`static constexpr bool per_request_admission` and `using hparams = ...;` (and, "
                "for a forward, `template <class B> using model = ...;`).");
  static_assert(binds_kv_pool<F> || kv::detail::ledger_pool_is_countable<F>(),
                "tf: this family's `ledger_pool = tf::ledgerPool<P>` names a pool the ledger "
                "cannot count. P must model tf::kv::ledger_countable (include/tf/kv/"
                "ledger_countable.hpp): totals, unit bytes, need_for, promised, fits, count_in, "
                "census.");
  static constexpr bool ok = true;
};

/// The pool type a checked family binds, whichever trait it used.
namespace detail {
template <class F>
struct pool_of_impl {
  using type = typename F::ledger_pool::pool_type;
};
template <binds_kv_pool F>
struct pool_of_impl<F> {
  using type = typename F::kv_pool::pool_type;
};
}  // namespace detail

template <class F>
using pool_of = typename detail::pool_of_impl<F>::type;

}  // namespace tf
