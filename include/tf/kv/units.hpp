#pragma once
/// What pools and the ledger share without including each other: a need, the room a pool asks,
/// and the census a pool reports.
#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace tf::kv {

/// Units a request needs: KV pages (regions for a contiguous cache) and recurrent-state slots.
struct need {
  std::int64_t pages = 0;
  std::int64_t slots = 0;
  friend bool operator==(need const&, need const&) = default;
};

/// The room a counted pool asks before it promises; the ledger answers through the lane host.
class room {
 public:
  virtual ~room() = default;
  /// Would a promise of `n` fit now?
  virtual bool fits(need n) const = 0;
  /// Counts a promise (`sign` +1) or its release (`sign` -1) in the room.
  virtual void count(need n, int sign) = 0;
};

/// A pool's page (and slot) counts; at rest it must balance, and its line is the stop census.
struct census {
  std::int64_t promised = 0;  // pages promised to running streams
  std::int64_t free = 0;      // pages on the free list
  std::int64_t held = 0;      // pages some stream holds
  std::int64_t store = 0;     // pages only the prompt store holds (reclaimable)
  std::int64_t total = 0;
  bool has_slots = false;
  std::int64_t slots_promised = 0;
  std::int64_t slots_free = 0;
  std::int64_t slots_held = 0;   // by streams and by kept prompt states
  std::int64_t slots_store = 0;  // of those, the ones only kept prompt states hold
  std::int64_t slots_total = 0;
  std::int64_t ledger_promised_bytes = 0;  // what the ledger still counts as promised

  /// Pages and slots add up while streams run: nothing lost, promises cover what is held.
  bool consistent() const {
    bool pages_ok = free >= 0 && held >= 0 && store >= 0 && free + held + store == total &&
                    held <= promised && promised <= total;
    bool slots_ok =
        !has_slots ||
        (slots_free >= 0 && slots_held >= 0 && slots_store >= 0 && slots_store <= slots_held &&
         slots_free + slots_held == slots_total && slots_promised <= slots_total);
    return pages_ok && slots_ok;
  }

  /// At rest (no stream running): nothing promised or held, free + store == total; slots held
  /// only by kept prompt states.
  bool balanced() const {
    return consistent() && promised == 0 && held == 0 && free + store == total &&
           ledger_promised_bytes == 0 &&
           (!has_slots || (slots_promised == 0 && slots_held == slots_store));
  }

  /// `promised 0, free 132 + store 0 == total 132`, plus `; slots free 55 + held 9 == 64`.
  std::string line() const {
    std::string s =
        fmt::format("promised {}, free {} + store {} == total {}", promised, free, store, total);
    if (has_slots)
      s += fmt::format("; slots free {} + held {} == {}", slots_free, slots_held, slots_total);
    return s;
  }

  friend bool operator==(census const&, census const&) = default;
};

}  // namespace tf::kv
