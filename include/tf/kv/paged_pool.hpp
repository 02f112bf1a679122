#pragma once
/// kv::paged_pool: which KV pages belong to which stream. Accounting only; it holds no tensors.
#include <tf/error.hpp>
#include <tf/kv/prompt_store.hpp>
#include <tf/kv/units.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace tf::kv {

/// The pool's shape. A page size of 0 is a contiguous cache: one region of `region_tokens` per
/// stream, and the pool's "pages" are those regions.
struct pool_config {
  std::int64_t page_tokens = 0;    // tokens per page; 0: contiguous regions
  std::int64_t total_pages = 0;    // pages (regions) in the pool
  std::int64_t region_tokens = 0;  // contiguous only: tokens one region holds
  std::int64_t page_bytes = 1;     // bytes of one page (region), for the ledger's room
};

/// What a new stream took from the prompt store.
struct reuse_result {
  std::int64_t tokens = 0;  // leading prompt tokens whose KV is already there
  std::int32_t slot = -1;   // recurrent state to start from (hybrid pools), or -1
  bool took_over = false;   // the kept entry was handed over whole (contiguous regions)
};

/// A page the caller must copy before the stream's next forward: the stream's reused prefix
/// ends inside a shared page, so it writes its next tokens into a copy of it.
struct page_copy {
  std::int32_t from = -1;
  std::int32_t to = -1;
  friend bool operator==(page_copy const&, page_copy const&) = default;
};

/// A request to the prompt store for pages, and what it gave.
struct reclaim_request {
  std::int64_t wanted = 0;   // pages asked for
  std::int64_t freed = 0;    // pages it freed
  std::int64_t evicted = 0;  // entries it evicted
  friend bool operator==(reclaim_request const&, reclaim_request const&) = default;
};

/// What keeping a stream's tokens did.
struct keep_result {
  std::int64_t tokens = 0;  // leading tokens now kept
  bool new_entry = false;   // false: nothing to keep, or the same tokens were already kept
  bool slot_kept = false;   // the entry took the stream's recurrent-state slot
};

/// Fixed-size pages, per-stream page tables, promises (prompt + max tokens) and holds (pages taken
/// as tokens arrive). Promises are asked of a `room` when counted, else of the pool's own total.
/// Kept sequences are reused at any token count: whole pages are shared, and a prefix that ends
/// inside a page shares that page until the stream's first hold, which copies it (page_copy).
class paged_pool {
 public:
  using config = pool_config;
  using stream_id = std::uint64_t;

  explicit paged_pool(pool_config c) : cfg_(c) {
    if (c.page_tokens < 0 || c.total_pages < 0 || c.page_bytes <= 0 ||
        (c.page_tokens == 0 && c.region_tokens <= 0))
      throw error(
          "tf::kv::paged_pool: bad shape: page_tokens {}, total_pages {}, region_tokens {}, "
          "page_bytes {} (contiguous pools need region_tokens > 0)",
          c.page_tokens, c.total_pages, c.region_tokens, c.page_bytes);
    stream_refs_.assign(static_cast<std::size_t>(c.total_pages), 0);
    store_refs_.assign(static_cast<std::size_t>(c.total_pages), 0);
    free_.reserve(static_cast<std::size_t>(c.total_pages));
    for (auto p = c.total_pages; p-- > 0;) free_.push_back(static_cast<std::int32_t>(p));
  }

  // Shape.
  std::int64_t page_tokens() const { return cfg_.page_tokens; }
  bool contiguous() const { return cfg_.page_tokens == 0; }
  std::int64_t total_pages() const { return cfg_.total_pages; }
  std::int64_t total_slots() const { return 0; }
  std::int64_t page_bytes() const { return cfg_.page_bytes; }
  std::int64_t slot_bytes() const { return 1; }
  pool_config const& shape() const { return cfg_; }

  /// Pages (regions) `tokens` tokens take.
  std::int64_t pages_for(std::int64_t tokens) const {
    if (tokens <= 0) return 0;
    auto per = contiguous() ? cfg_.region_tokens : cfg_.page_tokens;
    return (tokens + per - 1) / per;
  }
  /// The most pages one stream can ever hold: the pool, or one region.
  std::int64_t max_stream_pages() const {
    return contiguous() ? std::min<std::int64_t>(1, cfg_.total_pages) : cfg_.total_pages;
  }
  need need_for(std::int64_t tokens) const { return {pages_for(tokens), 0}; }
  /// Could a stream of `tokens` ever be admitted, even into an empty pool?
  bool can_ever_fit(std::int64_t tokens) const { return pages_for(tokens) <= max_stream_pages(); }

  /// Counts the pool's promises in `r` from now on; the pool must have none yet.
  void count_in(room* r) {
    if (promised_ != 0 || !streams_.empty())
      throw error(
          "tf::kv::paged_pool::count_in: the pool already has {} pages promised to {} "
          "streams; count it from the start",
          promised_, streams_.size());
    room_ = r;
  }
  bool counted() const { return room_ != nullptr; }

  // Counts.
  std::int64_t free_pages() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t held_pages() const { return held_; }
  std::int64_t store_pages() const { return stored_; }
  std::int64_t promised_pages() const { return promised_; }
  need promised() const { return {promised_, 0}; }

  /// The admission answer for `n`: the room's when counted, else the pool's own.
  bool fits(need n) const {
    if (n.slots > 0 || n.pages < 0) return false;
    return room_ ? room_->fits(n) : n.pages <= cfg_.total_pages - promised_;
  }
  bool fits(std::int64_t pages) const { return fits(need{pages, 0}); }

  /// Promises the pages `tokens` tokens take to a new stream; false (nothing changed) if they
  /// do not fit now or could never fit.
  bool promise(stream_id id, std::int64_t tokens) {
    check_new(id, tokens, "promise");
    auto n = need_for(tokens);
    if (n.pages > max_stream_pages() || !fits(n)) return false;
    commit_promise(id, tokens);
    if (room_) room_->count(n, +1);
    return true;
  }

  /// Records a promise the caller already checked (a composing pool asks its own room).
  void commit_promise(stream_id id, std::int64_t tokens) {
    check_new(id, tokens, "commit_promise");
    auto pages = pages_for(tokens);
    if (pages > max_stream_pages())
      throw error("tf::kv::paged_pool: stream {} needs {} pages; a stream holds at most {}", id,
                  pages, max_stream_pages());
    stream s;
    s.promise = pages;
    s.promise_tokens = tokens;
    streams_.emplace(id, std::move(s));
    promised_ += pages;
  }

  /// Starts a promised stream from the best kept prompt sharing `prompt`'s prefix, if any.
  reuse_result start(stream_id id, std::span<std::int32_t const> prompt, bool whole_only = false) {
    auto& s = get(id, "start");
    if (!s.table.empty() || s.tokens != 0)
      throw error("tf::kv::paged_pool::start: stream {} already holds {} tokens", id, s.tokens);
    auto limit =
        std::min<std::int64_t>(static_cast<std::int64_t>(prompt.size()) - 1, s.promise_tokens);
    if (limit <= 0) return {};
    auto m = store_.best(prompt, limit, reuse_rule{0, whole_only});
    if (!m) return {};
    reuse_result r;
    r.tokens = m->tokens;
    if (contiguous()) {
      // A region is written by one stream only, so the stream takes the kept one over.
      auto e = store_.remove(m->entry);
      for (auto p : e.pages) ref(p, +1, -1);
      s.table = std::move(e.pages);
      r.slot = e.slot;
      r.took_over = true;
    } else {
      // Every page the prefix touches is shared; a last, partial one is copied at the first hold.
      auto const& e = store_.get(m->entry);
      auto k = static_cast<std::size_t>(pages_for(m->tokens));
      s.table.assign(e.pages.begin(), e.pages.begin() + static_cast<std::ptrdiff_t>(k));
      for (auto p : s.table) ref(p, +1, 0);
      if (m->tokens % cfg_.page_tokens != 0) s.shared_tail = true;
      r.slot = e.slot;
      store_.touch(m->entry);
    }
    s.tokens = m->tokens;
    return r;
  }

  /// `n` more tokens of the stream arrive: take the pages they need, within the promise. Returns
  /// the page the caller must copy before writing them, when the stream's last page was shared.
  std::optional<page_copy> hold(stream_id id, std::int64_t n) {
    auto& s = get(id, "hold");
    if (n < 0) throw error("tf::kv::paged_pool::hold: stream {}: negative token count {}", id, n);
    auto tokens = s.tokens + n;
    if (tokens > s.promise_tokens)
      throw error(
          "tf::kv::paged_pool::hold: stream {} would hold {} tokens, past its promise of "
          "{} tokens ({} pages)",
          id, tokens, s.promise_tokens, s.promise);
    std::optional<page_copy> copy;
    if (s.shared_tail && n > 0) copy = own_tail(id, s);
    auto needed = pages_for(tokens);
    auto missing = needed - static_cast<std::int64_t>(s.table.size());
    if (missing > free_pages()) reclaim(missing - free_pages());
    if (missing > free_pages())
      throw error(
          "tf::kv::paged_pool::hold: stream {} needs {} pages but only {} are free after "
          "reclaiming the store; promises no longer cover holds",
          id, missing, free_pages());
    for (std::int64_t i = 0; i < missing; ++i) {
      auto p = free_.back();
      free_.pop_back();
      ref(p, +1, 0);
      s.table.push_back(p);
    }
    s.tokens = tokens;
    return copy;
  }

  /// Releases a stream: its promise returns to the room, unshared pages to the free list.
  void release(stream_id id) {
    auto it = streams_.find(id);
    if (it == streams_.end()) throw error("tf::kv::paged_pool::release: no stream {}", id);
    for (auto p : it->second.table) ref(p, -1, 0);
    promised_ -= it->second.promise;
    if (room_) room_->count(need{it->second.promise, 0}, -1);
    streams_.erase(it);
  }

  /// Keeps the stream's first `tokens` (what it wrote, at any count) in the store as an entry
  /// sharing its pages, with `slot` (hybrid pools: the state at the entry's end). An entry
  /// without a slot that a longer one covers is dropped: the longer one gives all it would.
  keep_result keep_prefix(stream_id id, std::span<std::int32_t const> tokens,
                          std::int32_t slot = -1) {
    auto& s = get(id, "keep_prefix");
    keep_result r;
    auto kept = std::min<std::int64_t>(static_cast<std::int64_t>(tokens.size()), s.tokens);
    auto pages = static_cast<std::size_t>(pages_for(kept));
    if (kept <= 0 || pages > s.table.size()) return r;
    auto t = tokens.first(static_cast<std::size_t>(kept));
    r.tokens = kept;
    if (auto same = store_.find_exact(t)) {
      store_.touch(*same);
      return r;
    }
    if (auto longer = slot < 0 ? store_.find_covering(t) : std::nullopt) {
      store_.touch(*longer);
      return r;
    }
    std::vector<std::int32_t> entry_pages(s.table.begin(),
                                          s.table.begin() + static_cast<std::ptrdiff_t>(pages));
    for (auto p : entry_pages) ref(p, 0, +1);
    if (slot < 0)
      for (auto covered : store_.covered_by(t)) drop_entry(covered);
    store_.add({t.begin(), t.end()}, std::move(entry_pages), slot);
    r.new_entry = true;
    r.slot_kept = slot >= 0;
    return r;
  }

  /// Keeps the stream's first `tokens` (keep_prefix), then releases the stream.
  keep_result keep(stream_id id, std::span<std::int32_t const> tokens, std::int32_t slot = -1) {
    auto r = keep_prefix(id, tokens, slot);
    release(id);
    return r;
  }

  /// Asks the store for `pages` free pages, evicting least recently used entries first.
  reclaim_request reclaim(std::int64_t pages) {
    reclaim_request r;
    r.wanted = pages;
    auto before = free_pages();
    while (free_pages() - before < pages && evict_lru()) ++r.evicted;
    r.freed = free_pages() - before;
    if (observer_) observer_(r);
    return r;
  }

  /// Evicts the least recently used kept prompt; false if the store is empty.
  bool evict_lru() {
    auto id = store_.lru();
    if (!id) return false;
    drop_entry(*id);
    return true;
  }

  /// Slots of evicted entries since the last call (a composing pool frees them).
  std::vector<std::int32_t> take_evicted_slots() { return std::exchange(evicted_slots_, {}); }

  /// Called with every reclaim request (tests and metrics watch them).
  void on_reclaim(std::function<void(reclaim_request const&)> f) { observer_ = std::move(f); }

  // Streams.
  bool has_stream(stream_id id) const { return streams_.contains(id); }
  std::size_t streams() const { return streams_.size(); }
  /// The page ids a forward indexes its KV storage with, in token order.
  std::span<std::int32_t const> page_table(stream_id id) const {
    return get(id, "page_table").table;
  }
  std::int64_t stream_tokens(stream_id id) const { return get(id, "stream_tokens").tokens; }
  std::int64_t stream_promise(stream_id id) const { return get(id, "stream_promise").promise; }
  /// Tokens promised to the stream (prompt + max tokens).
  std::int64_t stream_promise_tokens(stream_id id) const {
    return get(id, "stream_promise_tokens").promise_tokens;
  }
  prompt_store const& store() const { return store_; }

  kv::census census() const {
    kv::census c;
    c.promised = promised_;
    c.free = free_pages();
    c.held = held_;
    c.store = stored_;
    c.total = cfg_.total_pages;
    return c;
  }

 private:
  struct stream {
    std::int64_t promise = 0;         // pages
    std::int64_t promise_tokens = 0;  // prompt + max tokens
    std::int64_t tokens = 0;          // tokens held so far
    std::vector<std::int32_t> table;  // page ids in token order
    bool shared_tail = false;         // the last page is a kept entry's, to copy before writing
  };

  // The stream's shared last page becomes its own: a copy of it (the caller copies the rows), or
  // the page itself where no one else refers to it any more. A free page always exists when
  // another stream shares it, since promises count every stream's table in full.
  std::optional<page_copy> own_tail(stream_id id, stream& s) {
    s.shared_tail = false;
    auto const src = s.table.back();
    auto const i = static_cast<std::size_t>(src);
    if (stream_refs_[i] == 1 && store_refs_[i] == 0) return std::nullopt;
    if (free_.empty()) reclaim(1);
    if (stream_refs_[i] == 1 && store_refs_[i] == 0) return std::nullopt;
    if (free_.empty())
      throw error(
          "tf::kv::paged_pool::hold: stream {} must copy its shared last page but no page is "
          "free after reclaiming the store; promises no longer cover holds",
          id);
    auto dst = free_.back();
    free_.pop_back();
    ref(dst, +1, 0);
    s.table.back() = dst;
    ref(src, -1, 0);
    return page_copy{src, dst};
  }

  void drop_entry(std::uint64_t entry) {
    auto e = store_.remove(entry);
    for (auto p : e.pages) ref(p, 0, -1);
    if (e.slot >= 0) evicted_slots_.push_back(e.slot);
  }

  void check_new(stream_id id, std::int64_t tokens, char const* what) const {
    if (tokens <= 0)
      throw error("tf::kv::paged_pool::{}: stream {} asks for {} tokens; it needs at least 1", what,
                  id, tokens);
    if (streams_.contains(id))
      throw error("tf::kv::paged_pool::{}: stream {} already exists", what, id);
  }

  stream& get(stream_id id, char const* what) {
    return const_cast<stream&>(std::as_const(*this).get(id, what));
  }
  stream const& get(stream_id id, char const* what) const {
    auto it = streams_.find(id);
    if (it == streams_.end()) throw error("tf::kv::paged_pool::{}: no stream {}", what, id);
    return it->second;
  }

  // A page is held while a stream refers to it, in the store while only kept prompts do.
  void ref(std::int32_t page, int d_stream, int d_store) {
    auto i = static_cast<std::size_t>(page);
    auto& sr = stream_refs_[i];
    auto& st = store_refs_[i];
    bool was_held = sr > 0, was_store = sr == 0 && st > 0;
    sr += d_stream;
    st += d_store;
    if (sr < 0 || st < 0)
      throw error("tf::kv::paged_pool: page {} reference count went negative", page);
    bool is_held = sr > 0, is_store = sr == 0 && st > 0;
    held_ += static_cast<std::int64_t>(is_held) - static_cast<std::int64_t>(was_held);
    stored_ += static_cast<std::int64_t>(is_store) - static_cast<std::int64_t>(was_store);
    if ((was_held || was_store) && !is_held && !is_store) free_.push_back(page);
  }

  pool_config cfg_;
  std::vector<std::int32_t> stream_refs_;
  std::vector<std::int32_t> store_refs_;
  std::vector<std::int32_t> free_;  // a stack: the page freed last is reused first
  std::int64_t held_ = 0;
  std::int64_t stored_ = 0;  // pages only kept prompts refer to
  std::int64_t promised_ = 0;
  std::map<stream_id, stream> streams_;
  prompt_store store_;
  room* room_ = nullptr;
  std::vector<std::int32_t> evicted_slots_;
  std::function<void(reclaim_request const&)> observer_;
};

}  // namespace tf::kv
