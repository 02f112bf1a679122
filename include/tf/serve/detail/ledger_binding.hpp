#pragma once
/// The lane host's binding of a family's pool to the ledger: kvPool counts the engine's paged
/// pool directly, ledgerPool counts any pool through kv::ledger_countable.
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/kv/ledger.hpp>
#include <tf/kv/ledger_countable.hpp>
#include <tf/kv/paged_pool.hpp>
#include <tf/kv/units.hpp>

#include <type_traits>

namespace tf::serve::detail {

/// The ledger, seen by a pool as the room it asks before it promises.
class ledger_room final : public kv::room {
 public:
  explicit ledger_room(kv::ledger& l) : ledger_(&l) {}

  bool fits(kv::need n) const override { return ledger_->fits(n); }

  void count(kv::need n, int sign) override {
    if (sign < 0) {
      ledger_->release(n);
    } else if (!ledger_->promise(n)) {
      throw error("tf::serve: the ledger refused a promise of {} pages + {} slots it had granted",
                  n.pages, n.slots);
    }
  }

 private:
  kv::ledger* ledger_;
};

/// kvPool: the engine's paged pool; its pages are the ledger's page room.
inline void count_pool(kv::ledger& l, ledger_room& r, kv::paged_pool& p) {
  l.add_room(kv::unit::page, p.total_pages(), p.page_bytes());
  p.count_in(&r);
}

/// ledgerPool: a pool the ledger counts through its concept (pages, and slots if it has any).
template <kv::ledger_countable P>
void count_pool(kv::ledger& l, ledger_room& r, P& p) {
  l.add_room(kv::unit::page, p.total_pages(), p.page_bytes());
  if (p.total_slots() > 0) l.add_room(kv::unit::slot, p.total_slots(), p.slot_bytes());
  p.count_in(&r);
}

/// Counts a family's pool in the ledger through the trait the family declared.
template <class Family>
void bind_pool(kv::ledger& l, ledger_room& r, pool_of<Family>& p) {
  if constexpr (binds_kv_pool<Family>) {
    static_assert(std::is_same_v<pool_of<Family>, kv::paged_pool>,
                  "tf: kvPool<P> binds the engine's paged pool; use ledgerPool<P> for your own");
    count_pool(l, r, p);
  } else {
    static_assert(kv::ledger_countable<pool_of<Family>>,
                  "tf: a ledgerPool's pool must model tf::kv::ledger_countable");
    count_pool<pool_of<Family>>(l, r, p);
  }
}

}  // namespace tf::serve::detail
