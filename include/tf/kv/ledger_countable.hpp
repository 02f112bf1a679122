#pragma once
/// The concept a pool models so the ledger can count it (the ledgerPool binding).
#include <tf/kv/units.hpp>

#include <concepts>
#include <cstdint>

namespace tf::kv {

/// A pool the ledger counts: its totals and unit sizes give the ledger's room, its promises are
/// asked of and counted in a `room`, and it reports a census.
template <class P>
concept ledger_countable = requires(P& p, P const& cp, room* r, std::int64_t tokens) {
  { cp.total_pages() } -> std::same_as<std::int64_t>;
  { cp.total_slots() } -> std::same_as<std::int64_t>;
  { cp.page_bytes() } -> std::same_as<std::int64_t>;
  { cp.slot_bytes() } -> std::same_as<std::int64_t>;
  { cp.need_for(tokens) } -> std::same_as<need>;
  { cp.promised() } -> std::same_as<need>;
  { cp.fits(need{}) } -> std::same_as<bool>;
  {p.count_in(r)};
  { cp.census() } -> std::same_as<census>;
};

namespace detail {
/// True unless F declares `ledger_pool = tf::ledgerPool<P>` with a P that is not countable.
template <class F>
constexpr bool ledger_pool_is_countable() {
  if constexpr (requires { typename F::ledger_pool::pool_type; })
    return ledger_countable<typename F::ledger_pool::pool_type>;
  else
    return true;
}
}  // namespace detail

}  // namespace tf::kv
