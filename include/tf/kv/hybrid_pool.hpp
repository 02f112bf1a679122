#pragma once
/// kv::hybrid_pool: KV pages for attention layers plus recurrent-state slots, one per stream.
#include <tf/error.hpp>
#include <tf/kv/paged_pool.hpp>
#include <tf/kv/slots.hpp>
#include <tf/kv/units.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <utility>

namespace tf::kv {

/// The pages' shape, the slot count and the bytes of one slot.
struct hybrid_config {
  pool_config pages;
  std::int64_t total_slots = 0;
  std::int64_t slot_bytes = 1;
};

/// A paged pool and a slot set admitted together: a stream needs its pages and one slot, and
/// whichever runs out first makes a request wait. Kept prompts keep their slot, which is
/// reclaimable like their pages.
class hybrid_pool {
 public:
  using config = hybrid_config;
  using stream_id = paged_pool::stream_id;

  explicit hybrid_pool(hybrid_config c) : pages_(c.pages), slots_(c.total_slots), cfg_(c) {
    if (c.slot_bytes <= 0)
      throw error("tf::kv::hybrid_pool: slot bytes {} must be > 0", c.slot_bytes);
  }

  std::int64_t total_pages() const { return pages_.total_pages(); }
  std::int64_t total_slots() const { return slots_.total(); }
  std::int64_t page_bytes() const { return pages_.page_bytes(); }
  std::int64_t slot_bytes() const { return cfg_.slot_bytes; }
  std::int64_t page_tokens() const { return pages_.page_tokens(); }
  std::int64_t pages_for(std::int64_t tokens) const { return pages_.pages_for(tokens); }
  std::int64_t max_stream_pages() const { return pages_.max_stream_pages(); }
  need need_for(std::int64_t tokens) const { return {pages_.pages_for(tokens), 1}; }
  bool can_ever_fit(std::int64_t tokens) const {
    return pages_.can_ever_fit(tokens) && slots_.total() >= 1;
  }
  need promised() const { return {pages_.promised_pages(), slots_.promised()}; }

  /// Counts the pool's promises (pages and slots) in `r` from now on.
  void count_in(room* r) {
    if (pages_.streams() != 0)
      throw error("tf::kv::hybrid_pool::count_in: {} streams already run; count it from the start",
                  pages_.streams());
    room_ = r;
  }
  bool counted() const { return room_ != nullptr; }

  /// The admission answer: the room's when counted, else pages and slots each alone.
  bool fits(need n) const {
    if (n.pages < 0 || n.slots < 0) return false;
    if (room_) return room_->fits(n);
    return n.pages <= pages_.total_pages() - pages_.promised_pages() && slots_.fits(n.slots);
  }

  /// Promises pages for `tokens` and one slot; false (nothing changed) if either does not fit.
  bool promise(stream_id id, std::int64_t tokens) {
    if (pages_.has_stream(id))
      throw error("tf::kv::hybrid_pool::promise: stream {} already exists", id);
    if (tokens <= 0)
      throw error("tf::kv::hybrid_pool::promise: stream {} asks for {} tokens; it needs at least 1",
                  id, tokens);
    auto n = need_for(tokens);
    if (!can_ever_fit(tokens) || !fits(n)) return false;
    pages_.commit_promise(id, tokens);
    slots_.promise(1);
    if (room_) room_->count(n, +1);
    return true;
  }

  /// Starts a promised stream: reuses a kept prompt only as a whole (its state is at its end)
  /// and takes the stream's slot. `result.slot` is the state to start from (copy it into
  /// `stream_slot(id)` unless they are the same).
  reuse_result start(stream_id id, std::span<std::int32_t const> prompt) {
    auto r = pages_.start(id, prompt, true);
    if (r.took_over && r.slot >= 0) {
      stream_slot_[id] = r.slot;  // the kept state's slot moves to the stream with its region
      return r;
    }
    auto s = slots_.take();
    while (!s && pages_.evict_lru()) {
      free_evicted_slots();
      s = slots_.take();
    }
    if (!s)
      throw error(
          "tf::kv::hybrid_pool::start: stream {} has a slot promised but none is free "
          "after reclaiming the store ({} of {} held)",
          id, slots_.held_count(), slots_.total());
    stream_slot_[id] = *s;
    return r;
  }

  /// `n` more tokens of the stream arrive (the page to copy first, as paged_pool::hold).
  std::optional<page_copy> hold(stream_id id, std::int64_t n) {
    auto copy = pages_.hold(id, n);
    free_evicted_slots();
    return copy;
  }

  /// Releases a stream's pages, slot and promise.
  void release(stream_id id) {
    auto pages = pages_.stream_promise(id);
    pages_.release(id);
    if (auto it = stream_slot_.find(id); it != stream_slot_.end()) {
      slots_.give_back(it->second);
      stream_slot_.erase(it);
    }
    done(pages);
  }

  /// Keeps a prefix of the stream's tokens in the store with a free slot of its own, which the
  /// caller fills with the state at that prefix's end; -1 (nothing kept) when no slot is free.
  std::int32_t keep_prefix(stream_id id, std::span<std::int32_t const> tokens) {
    if (pages_.store().find_exact(tokens)) return -1;
    auto s = slots_.take();
    if (!s) return -1;
    auto r = pages_.keep_prefix(id, tokens, *s);
    if (!r.slot_kept) {
      slots_.give_back(*s);
      return -1;
    }
    return *s;
  }

  /// Keeps the stream's tokens (pages, and its slot: the state after them) in the store, then
  /// releases the rest.
  keep_result keep(stream_id id, std::span<std::int32_t const> prompt) {
    auto pages = pages_.stream_promise(id);
    std::int32_t slot = -1;
    if (auto it = stream_slot_.find(id); it != stream_slot_.end()) {
      slot = it->second;
      stream_slot_.erase(it);
    }
    auto r = pages_.keep(id, prompt, slot);
    if (slot >= 0 && !r.slot_kept) slots_.give_back(slot);
    done(pages);
    return r;
  }

  /// Asks the store for `pages` free pages (their entries' slots are freed too).
  reclaim_request reclaim(std::int64_t pages) {
    auto r = pages_.reclaim(pages);
    free_evicted_slots();
    return r;
  }

  void on_reclaim(std::function<void(reclaim_request const&)> f) {
    pages_.on_reclaim(std::move(f));
  }

  bool has_stream(stream_id id) const { return pages_.has_stream(id); }
  std::size_t streams() const { return pages_.streams(); }
  std::span<std::int32_t const> page_table(stream_id id) const { return pages_.page_table(id); }
  std::int64_t stream_tokens(stream_id id) const { return pages_.stream_tokens(id); }
  std::int64_t stream_promise_tokens(stream_id id) const {
    return pages_.stream_promise_tokens(id);
  }
  /// The stream's own state slot, once started.
  std::optional<std::int32_t> stream_slot(stream_id id) const {
    auto it = stream_slot_.find(id);
    if (it == stream_slot_.end()) return std::nullopt;
    return it->second;
  }
  prompt_store const& store() const { return pages_.store(); }
  paged_pool const& pages() const { return pages_; }
  kv::slots const& slot_set() const { return slots_; }

  kv::census census() const {
    auto c = pages_.census();
    c.has_slots = true;
    c.slots_promised = slots_.promised();
    c.slots_free = slots_.free_count();
    c.slots_held = slots_.held_count();
    for (auto const& e : pages_.store().entries()) c.slots_store += e.slot >= 0 ? 1 : 0;
    c.slots_total = slots_.total();
    return c;
  }

 private:
  void free_evicted_slots() {
    for (auto s : pages_.take_evicted_slots()) slots_.give_back(s);
  }
  void done(std::int64_t pages) {
    slots_.unpromise(1);
    if (room_) room_->count(need{pages, 1}, -1);
  }

  paged_pool pages_;
  kv::slots slots_;
  hybrid_config cfg_;
  std::map<stream_id, std::int32_t> stream_slot_;
  room* room_ = nullptr;
};

}  // namespace tf::kv
