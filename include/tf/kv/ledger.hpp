#pragma once
/// kv::ledger: the bytes of room, the promises counted in them, and the one admission answer.
#include <tf/error.hpp>
#include <tf/kv/units.hpp>

#include <algorithm>
#include <array>
#include <cstdint>

namespace tf::kv {

/// What the ledger counts: KV pages and recurrent-state slots are separate rooms, never fungible.
enum class unit : int { page = 0, slot = 1 };

/// The only admission check. Room is added by counting pools; promises are counted in bytes.
class ledger {
 public:
  /// Adds room for `count` units of kind `u`, each `unit_bytes` bytes.
  void add_room(unit u, std::int64_t count, std::int64_t unit_bytes) {
    auto& a = at(u);
    if (count < 0 || unit_bytes <= 0)
      throw error("tf::kv::ledger::add_room: count {} and unit bytes {} must be >= 0 and > 0",
                  count, unit_bytes);
    if (a.unit_bytes != 0 && a.unit_bytes != unit_bytes)
      throw error("tf::kv::ledger::add_room: unit bytes {} differ from the {} already counted",
                  unit_bytes, a.unit_bytes);
    a.unit_bytes = unit_bytes;
    a.room += count * unit_bytes;
  }

  /// Bytes of room of one kind, and in all.
  std::int64_t room_bytes(unit u) const { return at(u).room; }
  std::int64_t room_bytes() const { return accounts_[0].room + accounts_[1].room; }
  /// Bytes promised of one kind, and in all.
  std::int64_t promised_bytes(unit u) const { return at(u).promised; }
  std::int64_t promised_bytes() const { return accounts_[0].promised + accounts_[1].promised; }
  /// Bytes of one kind not promised (kept prompt states are not promises, so they count as room).
  std::int64_t available_bytes(unit u) const { return at(u).room - at(u).promised; }

  /// The room the ledger must find to grant `bytes`: never less than what it has.
  std::int64_t want(unit u, std::int64_t bytes) const {
    return std::max(available_bytes(u), bytes);
  }

  /// The admission answer: every kind's want fits in what that kind has available.
  bool fits(need n) const {
    if ((n.pages > 0 && at(unit::page).unit_bytes == 0) ||
        (n.slots > 0 && at(unit::slot).unit_bytes == 0))
      return false;  // a kind nobody counted has no room
    return want(unit::page, bytes_of(unit::page, n.pages)) <= available_bytes(unit::page) &&
           want(unit::slot, bytes_of(unit::slot, n.slots)) <= available_bytes(unit::slot);
  }

  /// Counts a promise if it fits; false (nothing counted) if not.
  bool promise(need n) {
    check(n, "promise");
    if (!fits(n)) return false;
    at(unit::page).promised += bytes_of(unit::page, n.pages);
    at(unit::slot).promised += bytes_of(unit::slot, n.slots);
    return true;
  }

  /// Returns a promise to the room; more than was promised is a bug in the caller.
  void release(need n) {
    check(n, "release");
    auto pb = bytes_of(unit::page, n.pages), sb = bytes_of(unit::slot, n.slots);
    if (pb > at(unit::page).promised || sb > at(unit::slot).promised)
      throw error("tf::kv::ledger::release: {} pages + {} slots exceed the promised {} + {} bytes",
                  n.pages, n.slots, at(unit::page).promised, at(unit::slot).promised);
    at(unit::page).promised -= pb;
    at(unit::slot).promised -= sb;
  }

  /// Bytes of `count` units of kind `u`.
  std::int64_t bytes_of(unit u, std::int64_t count) const { return count * at(u).unit_bytes; }

 private:
  struct account {
    std::int64_t unit_bytes = 0;
    std::int64_t room = 0;
    std::int64_t promised = 0;
  };

  static void check(need n, char const* what) {
    if (n.pages < 0 || n.slots < 0)
      throw error("tf::kv::ledger::{}: negative need ({} pages, {} slots)", what, n.pages, n.slots);
  }

  account& at(unit u) { return accounts_[static_cast<int>(u)]; }
  account const& at(unit u) const { return accounts_[static_cast<int>(u)]; }

  std::array<account, 2> accounts_{};
};

}  // namespace tf::kv
