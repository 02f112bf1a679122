#pragma once
/// serve::lane_admission: the lane host's admission loop over a family's KV pool, without HTTP.
/// Requests that do not fit wait in a bounded FIFO queue; one larger than the pool is refused.
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/kv/fwd.hpp>
#include <tf/kv/ledger.hpp>
#include <tf/kv/units.hpp>
#include <tf/serve/detail/ledger_binding.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::serve {

/// One generation request as admission sees it.
struct request {
  std::uint64_t id = 0;
  std::vector<std::int32_t> prompt_tokens;
  std::int64_t max_tokens = 0;
  bool reuse_prefix = true;  // false: start without a kept prefix (the whole prompt runs)
};

enum class submit_status { admitted, queued, rejected };
enum class reject_kind { none, queue_full, larger_than_pool };

/// The answer to a submit.
struct submit_result {
  submit_status status = submit_status::rejected;
  reject_kind kind = reject_kind::none;
  std::string reason;              // rejected: why, with the numbers
  std::int64_t reused_tokens = 0;  // admitted: leading prompt tokens the forward can skip
  std::int32_t reuse_slot = -1;    // admitted, hybrid: the kept state to start from, or -1
};

/// A request admitted from the queue.
struct admission {
  std::uint64_t id = 0;
  std::int64_t reused_tokens = 0;
  std::int32_t reuse_slot = -1;
};

/// What `/v1/load` reports.
struct lane_load {
  std::size_t running = 0;
  std::size_t queued = 0;
  std::size_t requeued = 0;
  std::int64_t pages_free = 0;
  std::int64_t pages_held = 0;
  std::int64_t pages_store = 0;
  std::int64_t slots_free = 0;
  std::int64_t slots_held = 0;
};

/// The lane host's limits.
struct lane_config {
  std::size_t max_running = 1;   // lanes (streams at once)
  std::size_t max_queue = 0;     // requests that may wait; one more is rejected
  int rank = 0;                  // rank 0 admits; other ranks replay its decisions
  int ranks = 1;                 // with more than one, rank 0 logs its decisions for the others
  std::int64_t lane_tokens = 0;  // families without per-request admission promise this per lane
  std::function<void(std::string_view)> log = {};  // default: stderr
};

enum class decision_kind { admit, tokens, finish, cancel, requeue, keep_prefix };

/// One admission decision of rank 0, for the other ranks to replay in order.
struct decision {
  decision_kind kind = decision_kind::admit;
  std::uint64_t id = 0;
  std::vector<std::int32_t> prompt;  // admit: the prompt; finish, keep_prefix: the tokens kept
  std::int64_t count = 0;            // admit: max tokens; tokens: how many arrived
  bool keep = false;                 // finish: keep `prompt` in the store; admit: reuse a prefix
};

/// The admission loop for one family: binds the family's pool to a ledger through its trait,
/// and answers every admission from that ledger alone. Driven by the server once per round.
template <class Family>
class lane_admission {
  static_assert(family_check<Family>::ok);

 public:
  using family = Family;
  using pool_type = pool_of<Family>;
  using pool_config = typename pool_type::config;

  lane_admission(pool_config pc, lane_config lc) : room_(ledger_), pool_(pc), cfg_(std::move(lc)) {
    if (cfg_.max_running == 0) throw error("tf::serve::lane_admission: max_running must be > 0");
    if (cfg_.rank < 0 || cfg_.ranks < 1 || cfg_.rank >= cfg_.ranks)
      throw error("tf::serve::lane_admission: rank {} of {} ranks", cfg_.rank, cfg_.ranks);
    if (!Family::per_request_admission && cfg_.lane_tokens <= 0)
      throw error("tf::serve::lane_admission: family '{}' admits whole lanes; lane_tokens is {}",
                  Family::name, cfg_.lane_tokens);
    if (!cfg_.log) cfg_.log = [](std::string_view s) { fmt::print(stderr, "{}\n", s); };
    if (cfg_.rank == 0) detail::bind_pool<Family>(ledger_, room_, pool_);
  }
  lane_admission(lane_admission const&) = delete;
  lane_admission& operator=(lane_admission const&) = delete;

  /// Admits `r` now, queues it, or rejects it (queue full, or larger than the whole pool).
  submit_result submit(request r) {
    if (cfg_.rank != 0)
      throw error("tf::serve::lane_admission::submit: rank {} only replays rank 0's decisions",
                  cfg_.rank);
    check_request(r);
    submit_result out;
    if (auto why = never_fits(r)) {
      out.kind = reject_kind::larger_than_pool;
      out.reason = std::move(*why);
      cfg_.log(out.reason);
      return out;
    }
    if (queue_.empty()) {
      if (auto a = try_admit(r)) {
        out.status = submit_status::admitted;
        out.reused_tokens = a->reused_tokens;
        out.reuse_slot = a->reuse_slot;
        return out;
      }
    }
    if (queue_.size() >= cfg_.max_queue) {
      out.kind = reject_kind::queue_full;
      out.reason = fmt::format(
          "tf: request {} rejected: the queue is full ({} waiting, at most {}; {} running)", r.id,
          queue_.size(), cfg_.max_queue, running_.size());
      return out;
    }
    queue_.push_back(std::move(r));
    out.status = submit_status::queued;
    return out;
  }

  /// Admits waiting requests in arrival order while the head fits (FIFO: no one jumps ahead).
  std::vector<admission> admit_waiting() {
    std::vector<admission> out;
    while (!queue_.empty()) {
      auto a = try_admit(queue_.front());
      if (!a) break;
      queue_.pop_front();
      out.push_back(*a);
    }
    return out;
  }

  /// `n` more tokens of a running request are about to be written (prefill or decode): hold
  /// their pages. Returns the page to copy before the write, when the request's last page is
  /// a kept one it shares.
  std::optional<kv::page_copy> on_tokens(std::uint64_t id, std::int64_t n) {
    running_at(id, "on_tokens");
    auto copy = pool_.hold(id, n);
    record({decision_kind::tokens, id, {}, n, false});
    return copy;
  }

  /// A running request ended: release its memory, or keep its prompt for prefix reuse.
  kv::keep_result finish(std::uint64_t id, bool keep_prompt) {
    auto& rr = running_at(id, "finish");
    if (!keep_prompt) return finish(id, std::span<std::int32_t const>{});
    auto prompt = rr.prompt_tokens;
    return finish(id, std::span<std::int32_t const>(prompt));
  }

  /// A running request ended: keep `tokens` (the sequence it wrote: prompt, then generated
  /// tokens) for prefix reuse, or release its memory when empty.
  kv::keep_result finish(std::uint64_t id, std::span<std::int32_t const> tokens) {
    running_at(id, "finish");
    kv::keep_result k;
    bool const keep = !tokens.empty();
    if (keep)
      k = pool_.keep(id, tokens);
    else
      pool_.release(id);
    running_.erase(id);
    record({decision_kind::finish, id, {tokens.begin(), tokens.end()}, 0, keep});
    return k;
  }

  /// Keeps a prefix of a running request's tokens as its own entry, with a free state slot the
  /// caller fills with the state there (pools with slots); -1 when nothing was kept.
  std::int32_t keep_prefix(std::uint64_t id, std::span<std::int32_t const> tokens) {
    running_at(id, "keep_prefix");
    if constexpr (requires { pool_.stream_slot(id); }) {
      auto slot = pool_.keep_prefix(id, tokens);
      if (slot >= 0) record({decision_kind::keep_prefix, id, {tokens.begin(), tokens.end()}, 0});
      return slot;
    } else {
      if (pool_.keep_prefix(id, tokens).new_entry)
        record({decision_kind::keep_prefix, id, {tokens.begin(), tokens.end()}, 0});
      return -1;
    }
  }

  /// Cancels a queued or running request; false if unknown.
  bool cancel(std::uint64_t id) {
    for (auto it = queue_.begin(); it != queue_.end(); ++it)
      if (it->id == id) {
        queue_.erase(it);
        return true;
      }
    if (!running_.contains(id)) return false;
    pool_.release(id);
    running_.erase(id);
    record({decision_kind::cancel, id, {}, 0, false});
    return true;
  }

  /// Puts a running request back at the head of the queue, its memory released.
  bool requeue(std::uint64_t id) {
    auto it = running_.find(id);
    if (it == running_.end()) return false;
    pool_.release(id);
    if (cfg_.rank == 0) queue_.push_front(std::move(it->second));
    running_.erase(it);
    ++requeued_;
    record({decision_kind::requeue, id, {}, 0, false});
    return true;
  }

  lane_load load() const {
    auto c = pool_.census();
    return {running_.size(), queue_.size(), requeued_,    c.free,
            c.held,          c.store,       c.slots_free, c.slots_held};
  }

  /// The pool's census, with what the ledger still counts as promised.
  kv::census census() const {
    auto c = pool_.census();
    c.ledger_promised_bytes = ledger_.promised_bytes();
    return c;
  }

  /// Stops: drops the queue, releases running requests, prints the census and checks it.
  kv::census stop() {
    queue_.clear();
    while (!running_.empty()) {
      auto id = running_.begin()->first;
      pool_.release(id);
      running_.erase(running_.begin());
      record({decision_kind::cancel, id, {}, 0, false});
    }
    auto c = census();
    if (c.balanced())
      cfg_.log(fmt::format("tf: KV census at stop (rank {}): {}", cfg_.rank, c.line()));
    else
      cfg_.log(
          fmt::format("tf: error: the KV census at stop does not balance (rank {}): {} "
                      "(held {}, ledger still promised {} bytes)",
                      cfg_.rank, c.line(), c.held, c.ledger_promised_bytes));
    return c;
  }

  /// Rank 0's decisions since the last call, for the other ranks to replay.
  std::vector<decision> take_decisions() { return std::exchange(decisions_, {}); }

  /// Replays rank 0's decisions on another rank's pool; a decision that cannot be replayed means
  /// the ranks diverged, and throws.
  void replay(std::span<decision const> ds) {
    if (cfg_.rank == 0)
      throw error("tf::serve::lane_admission::replay: rank 0 decides; it does not replay");
    for (auto const& d : ds) {
      switch (d.kind) {
        case decision_kind::admit: {
          request r{d.id, d.prompt, d.count, d.keep};
          check_request(r);
          if (!pool_.promise(d.id, tokens_of(r)))
            throw error(
                "tf: rank {} cannot replay the admission of request {}: its pool refuses "
                "{} tokens ({})",
                cfg_.rank, d.id, tokens_of(r), pool_.census().line());
          pool_.start(d.id, d.keep ? std::span<std::int32_t const>(r.prompt_tokens)
                                   : std::span<std::int32_t const>{});
          running_.emplace(d.id, std::move(r));
          break;
        }
        case decision_kind::tokens:
          running_at(d.id, "replay");
          pool_.hold(d.id, d.count);
          break;
        case decision_kind::finish:
          running_at(d.id, "replay");
          if (d.keep)
            pool_.keep(d.id, d.prompt);
          else
            pool_.release(d.id);
          running_.erase(d.id);
          break;
        case decision_kind::keep_prefix:
          keep_prefix(d.id, d.prompt);
          break;
        case decision_kind::cancel:
        case decision_kind::requeue:
          running_at(d.id, "replay");
          pool_.release(d.id);
          running_.erase(d.id);
          if (d.kind == decision_kind::requeue) ++requeued_;
          break;
      }
    }
  }

  pool_type const& pool() const { return pool_; }
  kv::ledger const& ledger() const { return ledger_; }
  /// The page ids of a running request, for the forward to index its KV storage with.
  std::span<std::int32_t const> page_table(std::uint64_t id) const { return pool_.page_table(id); }
  /// The running request's recurrent-state slot, or -1 (a pool without slots, or not started).
  std::int32_t state_slot(std::uint64_t id) const {
    if constexpr (requires { pool_.stream_slot(id); })
      return pool_.stream_slot(id).value_or(-1);
    else
      return -1;
  }
  bool running(std::uint64_t id) const { return running_.contains(id); }

 private:
  std::int64_t tokens_of(request const& r) const {
    if constexpr (Family::per_request_admission)
      return static_cast<std::int64_t>(r.prompt_tokens.size()) + r.max_tokens;
    else
      return cfg_.lane_tokens;
  }

  void check_request(request const& r) const {
    if (r.prompt_tokens.empty())
      throw error("tf::serve::lane_admission: request {} has an empty prompt", r.id);
    if (r.max_tokens < 0)
      throw error("tf::serve::lane_admission: request {} asks for {} max tokens", r.id,
                  r.max_tokens);
    bool queued = false;
    for (auto const& q : queue_) queued = queued || q.id == r.id;
    if (queued || running_.contains(r.id))
      throw error("tf::serve::lane_admission: request id {} is already {}", r.id,
                  queued ? "queued" : "running");
  }

  std::optional<std::string> never_fits(request const& r) const {
    auto asked = static_cast<std::int64_t>(r.prompt_tokens.size()) + r.max_tokens;
    if (!Family::per_request_admission && asked > cfg_.lane_tokens)
      return fmt::format(
          "tf: request {} refused: prompt {} + max {} tokens = {} exceed a lane "
          "of {} tokens",
          r.id, r.prompt_tokens.size(), r.max_tokens, asked, cfg_.lane_tokens);
    auto tokens = tokens_of(r);
    if (pool_.can_ever_fit(tokens)) return std::nullopt;
    auto n = pool_.need_for(tokens);
    if (n.slots > pool_.total_slots())
      return fmt::format("tf: request {} refused: the pool has no recurrent-state slots", r.id);
    return fmt::format(
        "tf: request {} refused: prompt {} + max {} tokens need {} pages ({}) but "
        "the whole pool holds {} (at most {} per stream); it can never be admitted",
        r.id, r.prompt_tokens.size(), r.max_tokens, n.pages,
        pool_.page_tokens() > 0 ? fmt::format("{} tokens per page", pool_.page_tokens())
                                : std::string("contiguous regions"),
        pool_.total_pages(), pool_.max_stream_pages());
  }

  // The ledger alone answers on rank 0; a replaying rank has only its own pool.
  bool fits_now(kv::need n) const { return cfg_.rank == 0 ? ledger_.fits(n) : pool_.fits(n); }

  std::optional<admission> try_admit(request& r) {
    if (running_.size() >= cfg_.max_running) return std::nullopt;
    auto tokens = tokens_of(r);
    if (!fits_now(pool_.need_for(tokens))) return std::nullopt;
    if (!pool_.promise(r.id, tokens))
      throw error("tf::serve: the pool refused request {} that the ledger admitted ({})", r.id,
                  pool_.census().line());
    auto reuse = pool_.start(r.id, r.reuse_prefix ? std::span<std::int32_t const>(r.prompt_tokens)
                                                  : std::span<std::int32_t const>{});
    record({decision_kind::admit, r.id, r.prompt_tokens, r.max_tokens, r.reuse_prefix});
    admission a{r.id, reuse.tokens, reuse.slot};
    running_.emplace(r.id, std::move(r));
    return a;
  }

  request& running_at(std::uint64_t id, char const* what) {
    auto it = running_.find(id);
    if (it == running_.end())
      throw error("tf::serve::lane_admission::{}: request {} is not running", what, id);
    return it->second;
  }

  void record(decision d) {
    if (cfg_.rank == 0 && cfg_.ranks > 1) decisions_.push_back(std::move(d));
  }

  kv::ledger ledger_;
  detail::ledger_room room_;
  pool_type pool_;
  lane_config cfg_;
  std::deque<request> queue_;
  std::map<std::uint64_t, request> running_;
  std::size_t requeued_ = 0;
  std::vector<decision> decisions_;
};

}  // namespace tf::serve
