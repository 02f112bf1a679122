#pragma once
/// The lane host: one engine thread that runs every request in lane rounds (cancels, admission,
/// one prompt chunk, one batched decode round over every running stream) on a paged KV pool.
#include <tf/error.hpp>
#include <tf/kv/paged_pool.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/serve/lane_admission.hpp>
#include <tf/serve/metrics.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tf::serve {

/// One row of a batched forward: new tokens at start_pos, written to and read from the row's
/// pages; all_logits asks for one logits row per token instead of only the last.
struct batch_row {
  std::span<std::int32_t const> tokens;
  std::int32_t start_pos = 0;
  std::span<std::int32_t const> page_table;
  bool all_logits = false;
};

/// A model the lane host can drive: a paged KV pool and one forward over many rows at once.
/// forward() writes, row after row, one [vocab] logits row (or one per token with all_logits).
template <class M>
concept batched_model = requires(M& m, std::span<batch_row const> rows, float* logits) {
  { m.vocab_size() } -> std::convertible_to<std::size_t>;
  { m.page_tokens() } -> std::convertible_to<std::size_t>;
  { m.num_pages() } -> std::convertible_to<std::size_t>;
  m.forward(rows, logits);
};

/// Why a request ended.
enum class finish_reason { length, stop, cancelled, error };

/// The OpenAI spelling of a finish reason.
inline char const* to_string(finish_reason r) {
  switch (r) {
    case finish_reason::length:
      return "length";
    case finish_reason::stop:
      return "stop";
    case finish_reason::cancelled:
      return "cancelled";
    case finish_reason::error:
      return "error";
  }
  return "error";
}

/// What a client asks the lane host to generate.
struct generation_request {
  std::vector<std::int32_t> prompt;
  int max_tokens = -1;  // -1: up to the stream's window
  sample::sampling_params sampling;
  std::vector<std::int32_t> stop_tokens;  // end-of-generation ids (not emitted)
};

/// The client side of one request: tokens arrive from the engine thread, cancel() goes back.
class request_stream {
 public:
  /// One wait's worth of output.
  struct chunk {
    std::vector<sample::sample_result> tokens;
    bool done = false;
    finish_reason reason = finish_reason::length;
    std::string error;
  };

  /// Waits up to `timeout` for tokens or the end; returns what arrived (maybe nothing).
  chunk next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || done_; });
    chunk c;
    c.tokens.swap(pending_);
    c.done = done_ && c.tokens.empty() ? true : done_;
    c.reason = reason_;
    c.error = error_;
    return c;
  }

  /// Asks the engine to end this request at its next round (client gone, stop string seen).
  void cancel(finish_reason why = finish_reason::cancelled) {
    cancel_reason_.store(static_cast<int>(why));
    cancel_.store(true);
  }

  bool cancel_requested() const { return cancel_.load(); }
  std::size_t prompt_tokens() const { return prompt_tokens_; }

  // Engine side.
  void push(sample::sample_result r) {
    {
      std::lock_guard lock(mutex_);
      pending_.push_back(std::move(r));
    }
    cv_.notify_all();
  }
  void finish(finish_reason why, std::string err = {}) {
    {
      std::lock_guard lock(mutex_);
      if (done_) return;
      done_ = true;
      reason_ = why;
      error_ = std::move(err);
    }
    cv_.notify_all();
  }
  finish_reason cancel_reason() const { return static_cast<finish_reason>(cancel_reason_.load()); }
  std::size_t prompt_tokens_ = 0;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<sample::sample_result> pending_;
  bool done_ = false;
  finish_reason reason_ = finish_reason::length;
  std::string error_;
  std::atomic<bool> cancel_{false};
  std::atomic<int> cancel_reason_{static_cast<int>(finish_reason::cancelled)};
};

/// Why a request was refused.
enum class reject_reason {
  none,
  queue_full,
  larger_than_pool,
  context_length_exceeded,
  stopping,
  bad_request
};

/// submit()'s answer: the stream to read when accepted, else why not (with a message).
struct stream_submit {
  submit_status status = submit_status::rejected;
  reject_reason reason = reject_reason::none;
  std::string message;
  std::shared_ptr<request_stream> stream;
};

/// A snapshot for /v1/load and /metrics.
struct load_snapshot {
  std::size_t running = 0, queued = 0, requeued = 0;
  std::size_t pages_free = 0, pages_held = 0, pages_promised = 0, pages_store = 0, pages_total = 0;
  std::size_t slots = 0, slots_free = 0;
  std::size_t max_running_seen = 0;
  std::uint64_t rounds = 0;
};

/// The stop census (kv::census): `promised 0, free N + store S == total N` once balanced.
using census = kv::census;

/// Lane host settings.
struct host_config {
  std::size_t parallel = 4;         // streams in the rounds at once
  std::size_t context = 4096;       // token window per stream
  std::size_t max_queue = 64;       // waiting requests before queue_full
  std::size_t prefill_chunk = 256;  // prompt tokens per round
};

/// Runs every request of `Model` through the lane rounds on one engine thread; `Family` binds
/// the paged pool to the KV ledger (lane_admission), the only admission check.
template <batched_model Model, class Family>
class lane_host {
 public:
  using clock = std::chrono::steady_clock;

  lane_host(Model& model, host_config cfg, metrics* m = nullptr)
      : model_(model),
        cfg_(check(cfg)),
        metrics_(m ? m : &own_metrics_),
        admission_(kv::pool_config{static_cast<std::int64_t>(model.page_tokens()),
                                   static_cast<std::int64_t>(model.num_pages()), 0, 1},
                   admission_config(cfg_)) {
    if (model_.page_tokens() == 0) throw error("tf: the model's page size is 0 tokens");
    publish_locked();
    engine_ = std::thread([this] { run(); });
  }
  lane_host(lane_host const&) = delete;
  lane_host& operator=(lane_host const&) = delete;
  ~lane_host() { shutdown(std::chrono::milliseconds(0)); }

  host_config const& config() const { return cfg_; }
  metrics& stats() { return *metrics_; }

  /// Queues a request for admission; refuses it at once when it can never run or the queue is full.
  stream_submit submit(generation_request req) {
    stream_submit out;
    auto const n = req.prompt.size();
    if (n == 0) return reject(out, reject_reason::bad_request, "the prompt has no tokens");
    for (auto t : req.prompt)
      if (t < 0 || static_cast<std::size_t>(t) >= model_.vocab_size())
        return reject(
            out, reject_reason::bad_request,
            fmt::format("prompt token {} is outside the vocabulary of {}", t, model_.vocab_size()));
    if (n >= cfg_.context) {
      metrics_->rejected_context++;
      return reject(out, reject_reason::context_length_exceeded,
                    fmt::format("the prompt has {} tokens; this server's context window is {} "
                                "tokens per stream (at least 1 must be left to generate)",
                                n, cfg_.context));
    }
    try {
      sample::validate(req.sampling);
    } catch (tf::error const& e) {
      return reject(out, reject_reason::bad_request, e.what());
    }
    std::size_t const room = cfg_.context - n;
    req.max_tokens = static_cast<int>(
        req.max_tokens < 0 ? room : std::min(room, static_cast<std::size_t>(req.max_tokens)));
    auto s = std::make_shared<request_stream>();
    s->prompt_tokens_ = n;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return reject(out, reject_reason::stopping, "the server is shutting down");
      auto id = ++next_id_;
      auto r = admission_.submit({id, req.prompt, req.max_tokens});
      if (r.status == submit_status::rejected) {
        bool const full = r.kind == reject_kind::queue_full;
        (full ? metrics_->rejected_queue_full : metrics_->rejected_larger_than_pool)++;
        return reject(out, full ? reject_reason::queue_full : reject_reason::larger_than_pool,
                      r.reason);
      }
      auto l = std::make_unique<lane>();
      l->id = id;
      l->req = std::move(req);
      l->stream = s;
      l->arrived = clock::now();
      if (r.status == submit_status::admitted) l->reused = r.reused_tokens;
      if (r.status == submit_status::admitted)
        inbox_.push_back(std::move(l));
      else
        waiting_.push_back(std::move(l));
      out.status = r.status;
      publish_locked();
    }
    cv_.notify_all();
    out.stream = std::move(s);
    return out;
  }

  /// Running, queued, requeued, pages and slots, as of the last round.
  load_snapshot load() const {
    std::lock_guard lock(mutex_);
    return snapshot_;
  }

  /// The census of the pool now (balanced once every request is done).
  census count() const {
    std::lock_guard lock(mutex_);
    return admission_.census();
  }

  /// Stops taking requests, lets running ones finish for `grace`, cancels the rest, joins the
  /// engine thread and returns the stop census.
  census shutdown(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mutex_);
      if (!stopping_) drain_deadline_ = clock::now() + grace;
      stopping_ = true;
    }
    cv_.notify_all();
    if (engine_.joinable()) engine_.join();
    return count();
  }

 private:
  struct lane {
    std::uint64_t id = 0;
    generation_request req;
    std::shared_ptr<request_stream> stream;
    std::int64_t reused = 0;            // prompt tokens the prompt store already had
    std::vector<std::int32_t> pages;    // page table, refreshed after each hold
    std::size_t pos = 0;                // tokens in the KV
    std::vector<std::int32_t> history;  // prompt + generated
    std::int32_t pending = -1;          // sampled, not yet in the KV
    int generated = 0;
    bool stream_done = false;
    std::optional<sample::sampler> sampler;
    clock::time_point arrived, last_token;
  };

  static lane_config admission_config(host_config const& c) {
    lane_config lc;
    lc.max_running = c.parallel;
    lc.max_queue = c.max_queue;
    lc.log = [](std::string_view) {};  // refusals reach the client as HTTP errors
    return lc;
  }

  static host_config check(host_config c) {
    if (c.parallel == 0) throw error("tf: lane host needs --parallel >= 1 (got 0)");
    if (c.context < 2) throw error("tf: lane host needs --context >= 2 (got {})", c.context);
    if (c.prefill_chunk == 0) c.prefill_chunk = 256;
    return c;
  }

  stream_submit& reject(stream_submit& out, reject_reason r, std::string msg) {
    if (r == reject_reason::bad_request) metrics_->rejected_bad_request++;
    out.status = submit_status::rejected;
    out.reason = r;
    out.message = std::move(msg);
    return out;
  }

  // Holds pages for tokens [l.pos, l.pos + n) and refreshes the lane's page table.
  void hold(lane& l, std::size_t n) {
    std::lock_guard lock(mutex_);
    admission_.on_tokens(l.id, static_cast<std::int64_t>(n));
    auto t = admission_.page_table(l.id);
    l.pages.assign(t.begin(), t.end());
  }

  void end(lane& l, finish_reason why, std::string err = {}) {
    {
      std::lock_guard lock(mutex_);
      // A prompt read in full is kept in the prompt store for prefix reuse.
      bool keep = why != finish_reason::error && l.pos >= l.req.prompt.size();
      if (why == finish_reason::cancelled || !keep)
        admission_.cancel(l.id);
      else
        admission_.finish(l.id, true);
    }
    l.stream_done = true;
    if (why == finish_reason::cancelled) metrics_->cancelled++;
    metrics_->requests_finished++;
    l.stream->finish(why, std::move(err));
  }

  // Records a sampled token; the request ends on a stop token, at max_tokens or a full window.
  void emit(lane& l, sample::sample_result r) {
    auto now = clock::now();
    if (l.generated == 0)
      metrics_->ttft.observe(std::chrono::duration<double>(now - l.arrived).count());
    else
      metrics_->inter_token.observe(std::chrono::duration<double>(now - l.last_token).count());
    l.last_token = now;
    ++l.generated;
    metrics_->generation_tokens++;
    auto tok = r.token;
    if (std::find(l.req.stop_tokens.begin(), l.req.stop_tokens.end(), tok) !=
        l.req.stop_tokens.end()) {
      end(l, finish_reason::stop);
      return;
    }
    l.stream->push(std::move(r));
    l.history.push_back(tok);
    l.pending = tok;
    if (l.generated >= l.req.max_tokens || l.pos + 1 >= cfg_.context) end(l, finish_reason::length);
  }

  void start(lane& l) {
    l.history = l.req.prompt;
    l.sampler.emplace(l.req.sampling);
    // Reuse at most prompt-1 tokens: the last one runs again to give the first logits.
    auto const reuse = std::min<std::size_t>(
        static_cast<std::size_t>(std::max<std::int64_t>(l.reused, 0)), l.req.prompt.size() - 1);
    l.pos = reuse;
    {
      std::lock_guard lock(mutex_);
      auto t = admission_.page_table(l.id);
      l.pages.assign(t.begin(), t.end());
    }
    metrics_->prompt_tokens += l.req.prompt.size() - reuse;
  }

  void run() {
    std::vector<float> logits;
    std::vector<batch_row> rows;
    std::vector<lane*> row_lanes;
    std::vector<std::int32_t> tokens;
    for (;;) {
      std::vector<std::unique_ptr<lane>> admitted;
      bool stop_now = false, past_grace = false;
      {
        std::unique_lock lock(mutex_);
        if (running_.empty() && waiting_.empty() && inbox_.empty() && !stopping_) {
          publish_locked();
          cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !inbox_.empty(); });
        }
        past_grace = stopping_ && clock::now() >= drain_deadline_;
        // Cancels of waiting requests: they leave the queue.
        for (auto it = waiting_.begin(); it != waiting_.end();) {
          if ((*it)->stream->cancel_requested() || past_grace) {
            admission_.cancel((*it)->id);
            metrics_->cancelled++;
            metrics_->requests_finished++;
            (*it)->stream->finish(finish_reason::cancelled);
            it = waiting_.erase(it);
          } else {
            ++it;
          }
        }
        // Admission through the ledger, first come first served.
        for (auto& l : inbox_) admitted.push_back(std::move(l));
        inbox_.clear();
        for (auto const& a : admission_.admit_waiting()) {
          auto it = std::find_if(waiting_.begin(), waiting_.end(),
                                 [&](auto const& w) { return w->id == a.id; });
          if (it == waiting_.end()) continue;
          (*it)->reused = a.reused_tokens;
          admitted.push_back(std::move(*it));
          waiting_.erase(it);
        }
        stop_now = stopping_ && waiting_.empty() && running_.empty() && admitted.empty();
      }
      if (stop_now) break;
      for (auto& a : admitted) {
        start(*a);
        running_.push_back(std::move(a));
      }
      for (auto& l : running_)
        if (!l->stream_done && (l->stream->cancel_requested() || past_grace))
          end(*l, past_grace ? finish_reason::cancelled : l->stream->cancel_reason());
      std::erase_if(running_, [](auto const& l) { return l->stream_done; });
      max_running_ = std::max(max_running_, running_.size());
      try {
        prefill_round(logits);
        decode_round(logits, rows, row_lanes, tokens);
      } catch (std::exception const& e) {
        for (auto& l : running_)
          if (!l->stream_done)
            end(*l, finish_reason::error, fmt::format("tf: forward failed: {}", e.what()));
      }
      std::erase_if(running_, [](auto const& l) { return l->stream_done; });
      std::lock_guard lock(mutex_);
      ++rounds_;
      publish_locked();
    }
    std::lock_guard lock(mutex_);
    publish_locked();
  }

  // One chunk of the oldest prompt still being read.
  void prefill_round(std::vector<float>& logits) {
    for (auto& lp : running_) {
      auto& l = *lp;
      if (l.stream_done || l.pos >= l.req.prompt.size()) continue;
      auto const n = std::min(cfg_.prefill_chunk, l.req.prompt.size() - l.pos);
      hold(l, n);
      batch_row row{std::span<std::int32_t const>(l.req.prompt).subspan(l.pos, n),
                    static_cast<std::int32_t>(l.pos), l.pages, false};
      logits.resize(model_.vocab_size());
      model_.forward(std::span<batch_row const>(&row, 1), logits.data());
      l.pos += n;
      if (l.pos == l.req.prompt.size()) emit(l, l.sampler->sample(logits, l.history));
      return;
    }
  }

  // One token for every stream past its prompt, as one batched forward.
  void decode_round(std::vector<float>& logits, std::vector<batch_row>& rows,
                    std::vector<lane*>& row_lanes, std::vector<std::int32_t>& tokens) {
    rows.clear();
    row_lanes.clear();
    tokens.clear();
    for (auto& lp : running_) {
      auto& l = *lp;
      if (l.stream_done || l.pending < 0 || l.pos < l.req.prompt.size()) continue;
      row_lanes.push_back(&l);
      tokens.push_back(l.pending);
    }
    if (row_lanes.empty()) return;
    for (std::size_t i = 0; i < row_lanes.size(); ++i) {
      auto& l = *row_lanes[i];
      hold(l, 1);
      rows.push_back({std::span<std::int32_t const>(&tokens[i], 1),
                      static_cast<std::int32_t>(l.pos), l.pages, false});
    }
    logits.resize(rows.size() * model_.vocab_size());
    model_.forward(std::span<batch_row const>(rows), logits.data());
    for (std::size_t i = 0; i < row_lanes.size(); ++i) {
      auto& l = *row_lanes[i];
      l.pos += 1;
      l.pending = -1;
      auto row =
          std::span<float const>(logits).subspan(i * model_.vocab_size(), model_.vocab_size());
      emit(l, l.sampler->sample(row, l.history));
    }
  }

  void publish_locked() {
    auto c = admission_.census();
    auto l = admission_.load();
    snapshot_.running = l.running;
    snapshot_.queued = l.queued;
    snapshot_.requeued = l.requeued;
    snapshot_.pages_free = static_cast<std::size_t>(c.free);
    snapshot_.pages_held = static_cast<std::size_t>(c.held);
    snapshot_.pages_promised = static_cast<std::size_t>(c.promised);
    snapshot_.pages_store = static_cast<std::size_t>(c.store);
    snapshot_.pages_total = static_cast<std::size_t>(c.total);
    snapshot_.slots = cfg_.parallel;
    snapshot_.slots_free = cfg_.parallel - std::min(cfg_.parallel, l.running);
    snapshot_.max_running_seen = std::max(max_running_, l.running);
    snapshot_.rounds = rounds_;
  }

  Model& model_;
  host_config cfg_;
  metrics own_metrics_;
  metrics* metrics_;

  mutable std::mutex mutex_;  // guards admission_, the queues and the snapshot
  lane_admission<Family> admission_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<lane>> waiting_;
  std::vector<std::unique_ptr<lane>> inbox_;  // admitted at submit, not yet started
  bool stopping_ = false;
  clock::time_point drain_deadline_{};
  load_snapshot snapshot_;
  std::uint64_t rounds_ = 0;
  std::uint64_t next_id_ = 0;
  std::size_t max_running_ = 0;

  std::vector<std::unique_ptr<lane>> running_;  // engine thread only
  std::thread engine_;
};

}  // namespace tf::serve
