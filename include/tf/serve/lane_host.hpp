#pragma once
/// The lane host: one engine thread that runs every request in lane rounds (cancels, admission,
/// one prompt chunk, one batched decode round over every running stream) on a paged KV pool.
#include <tf/error.hpp>
#include <tf/sample/sampler.hpp>
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

/// How submit() answered.
enum class submit_status { admitted, queued, rejected };

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
struct submit_result {
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

/// The stop census: every page is free or in the store, and nothing is promised.
struct census {
  std::size_t promised = 0, free = 0, store = 0, held = 0, total = 0;
  bool balanced() const { return promised == 0 && held == 0 && free + store == total; }
  std::string line() const {
    return fmt::format("promised {}, free {} + store {} == total {}", promised, free, store, total);
  }
};

/// Lane host settings.
struct lane_config {
  std::size_t parallel = 4;         // streams in the rounds at once
  std::size_t context = 4096;       // token window per stream
  std::size_t max_queue = 64;       // waiting requests before queue_full
  std::size_t prefill_chunk = 256;  // prompt tokens per round
};

namespace detail {

/// Page accounting: promise a request's pages at admission, hold them as tokens arrive.
class page_admission {
 public:
  explicit page_admission(std::size_t total) : total_(total) {
    free_.reserve(total);
    for (std::size_t i = total; i-- > 0;) free_.push_back(static_cast<std::int32_t>(i));
  }
  std::size_t total() const { return total_; }
  bool fits(std::size_t pages) const { return promised_ + pages <= free_.size(); }
  void promise(std::size_t pages) {
    if (!fits(pages))
      throw error("tf: promise of {} pages past the {} free", pages, free_.size() - promised_);
    promised_ += pages;
  }
  std::int32_t hold() {
    if (promised_ == 0 || free_.empty()) throw error("tf: hold without a promised page");
    --promised_;
    auto p = free_.back();
    free_.pop_back();
    return p;
  }
  void release(std::span<std::int32_t const> pages, std::size_t unused_promise) {
    for (auto p : pages) free_.push_back(p);
    promised_ -= std::min(promised_, unused_promise);
  }
  census count() const { return {promised_, free_.size(), 0, total_ - free_.size(), total_}; }

 private:
  std::size_t total_;
  std::vector<std::int32_t> free_;
  std::size_t promised_ = 0;
};

}  // namespace detail

/// Runs every request of `Model` through the lane rounds on one engine thread.
template <batched_model Model>
class lane_host {
 public:
  using clock = std::chrono::steady_clock;

  lane_host(Model& model, lane_config cfg, metrics* m = nullptr)
      : model_(model), cfg_(cfg), metrics_(m ? m : &own_metrics_), pool_(model.num_pages()) {
    if (cfg_.parallel == 0) throw error("tf: lane host needs --parallel >= 1 (got 0)");
    if (cfg_.context < 2) throw error("tf: lane host needs --context >= 2 (got {})", cfg_.context);
    if (model_.page_tokens() == 0) throw error("tf: the model's page size is 0 tokens");
    if (cfg_.prefill_chunk == 0) cfg_.prefill_chunk = 256;
    engine_ = std::thread([this] { run(); });
  }
  lane_host(lane_host const&) = delete;
  lane_host& operator=(lane_host const&) = delete;
  ~lane_host() { shutdown(std::chrono::milliseconds(0)); }

  lane_config const& config() const { return cfg_; }
  metrics& stats() { return *metrics_; }

  /// Pages a request needs for its whole window.
  std::size_t pages_for(std::size_t prompt, int max_tokens) const {
    std::size_t room = cfg_.context - std::min(cfg_.context, prompt);
    std::size_t gen = max_tokens < 0 ? room : std::min(room, static_cast<std::size_t>(max_tokens));
    std::size_t tokens = prompt + gen;
    return (tokens + model_.page_tokens() - 1) / model_.page_tokens();
  }

  /// Queues a request for admission; refuses it at once when it can never run or the queue is full.
  submit_result submit(generation_request req) {
    submit_result out;
    auto const n = req.prompt.size();
    if (n == 0) return reject(out, reject_reason::bad_request, "the prompt has no tokens");
    for (auto t : req.prompt)
      if (t < 0 || static_cast<std::size_t>(t) >= model_.vocab_size())
        return reject(
            out, reject_reason::bad_request,
            fmt::format("prompt token {} is outside the vocabulary of {}", t, model_.vocab_size()));
    if (n >= cfg_.context) {
      metrics_->rejected_context++;
      return reject(
          out, reject_reason::context_length_exceeded,
          fmt::format("the prompt has {} tokens; this server's context window is {} tokens "
                      "per stream (at least 1 must be left to generate)",
                      n, cfg_.context));
    }
    try {
      sample::validate(req.sampling);
    } catch (tf::error const& e) {
      return reject(out, reject_reason::bad_request, e.what());
    }
    auto need = pages_for(n, req.max_tokens);
    if (need > pool_.total()) {
      metrics_->rejected_larger_than_pool++;
      return reject(out, reject_reason::larger_than_pool,
                    fmt::format("the request needs {} KV pages, more than the whole pool of {}",
                                need, pool_.total()));
    }
    auto s = std::make_shared<request_stream>();
    s->prompt_tokens_ = n;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return reject(out, reject_reason::stopping, "the server is shutting down");
      if (waiting_.size() >= cfg_.max_queue) {
        metrics_->rejected_queue_full++;
        return reject(out, reject_reason::queue_full,
                      fmt::format("{} requests are already waiting (the queue holds {})",
                                  waiting_.size(), cfg_.max_queue));
      }
      auto w = std::make_unique<lane>();
      w->req = std::move(req);
      w->stream = s;
      w->need = need;
      w->arrived = clock::now();
      waiting_.push_back(std::move(w));
      out.status = running_count_ < cfg_.parallel && waiting_.size() == 1 ? submit_status::admitted
                                                                          : submit_status::queued;
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
    return census_;
  }

  /// Stops taking requests, lets running ones finish for `grace`, cancels the rest, joins the
  /// engine thread and returns the stop census.
  census shutdown(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      drain_deadline_ = clock::now() + grace;
    }
    cv_.notify_all();
    if (engine_.joinable()) engine_.join();
    return count();
  }

 private:
  struct lane {
    generation_request req;
    std::shared_ptr<request_stream> stream;
    std::size_t need = 0;  // pages promised at admission
    std::vector<std::int32_t> pages;
    std::size_t pos = 0;                // tokens in the KV
    std::vector<std::int32_t> history;  // prompt + generated
    std::int32_t pending = -1;          // sampled, not yet in the KV
    int generated = 0;
    bool stream_done = false;
    std::optional<sample::sampler> sampler;
    clock::time_point arrived, last_token;
  };

  submit_result& reject(submit_result& out, reject_reason r, std::string msg) {
    if (r == reject_reason::bad_request) metrics_->rejected_bad_request++;
    out.status = submit_status::rejected;
    out.reason = r;
    out.message = std::move(msg);
    return out;
  }

  void ensure_pages(lane& l, std::size_t tokens) {
    auto const pt = model_.page_tokens();
    while (l.pages.size() * pt < tokens) l.pages.push_back(pool_.hold());
  }

  void end(lane& l, finish_reason why, std::string err = {}) {
    pool_.release(l.pages, l.need - l.pages.size());
    l.pages.clear();
    l.need = 0;
    l.stream_done = true;
    if (why == finish_reason::cancelled) metrics_->cancelled++;
    metrics_->requests_finished++;
    l.stream->finish(why, std::move(err));
  }

  // Records a sampled token; returns false when the request ended with it.
  bool emit(lane& l, sample::sample_result r) {
    auto now = clock::now();
    if (l.generated == 0)
      metrics_->ttft.observe(std::chrono::duration<double>(now - l.arrived).count());
    else
      metrics_->inter_token.observe(std::chrono::duration<double>(now - l.last_token).count());
    l.last_token = now;
    ++l.generated;
    metrics_->generation_tokens++;
    auto tok = r.token;
    bool const is_stop = std::find(l.req.stop_tokens.begin(), l.req.stop_tokens.end(), tok) !=
                         l.req.stop_tokens.end();
    if (is_stop) {
      end(l, finish_reason::stop);
      return false;
    }
    l.stream->push(std::move(r));
    l.history.push_back(tok);
    l.pending = tok;
    if ((l.req.max_tokens >= 0 && l.generated >= l.req.max_tokens) || l.pos + 1 >= cfg_.context) {
      end(l, finish_reason::length);
      return false;
    }
    return true;
  }

  void fail_all(std::string const& what) {
    for (auto& l : running_) end(*l, finish_reason::error, what);
    running_.clear();
  }

  void run() {
    std::vector<float> logits;
    std::vector<batch_row> rows;
    std::vector<lane*> row_lanes;
    std::vector<std::int32_t> one_token;
    for (;;) {
      std::vector<std::unique_ptr<lane>> admitted;
      bool stop_now = false;
      {
        std::unique_lock lock(mutex_);
        if (running_.empty() && waiting_.empty() && !stopping_) {
          publish_locked();
          cv_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
        }
        bool const past_grace = stopping_ && clock::now() >= drain_deadline_;
        // Cancels: waiting requests leave the queue; running ones end below.
        for (auto it = waiting_.begin(); it != waiting_.end();) {
          if ((*it)->stream->cancel_requested() || past_grace) {
            metrics_->cancelled++;
            metrics_->requests_finished++;
            (*it)->stream->finish(past_grace ? finish_reason::cancelled
                                             : (*it)->stream->cancel_reason());
            it = waiting_.erase(it);
          } else {
            ++it;
          }
        }
        // Admission, first come first served: the head waits until its pages fit.
        while (!stopping_ && !waiting_.empty() &&
               running_.size() + admitted.size() < cfg_.parallel &&
               pool_.fits(waiting_.front()->need)) {
          pool_.promise(waiting_.front()->need);
          admitted.push_back(std::move(waiting_.front()));
          waiting_.pop_front();
        }
        if (stopping_ && past_grace) {
          for (auto& l : running_) l->stream->cancel(finish_reason::cancelled);
        }
        stop_now = stopping_ && waiting_.empty() && running_.empty() && admitted.empty();
      }
      if (stop_now) break;
      for (auto& a : admitted) {
        a->history = a->req.prompt;
        a->sampler.emplace(a->req.sampling);
        metrics_->prompt_tokens += a->req.prompt.size();
        running_.push_back(std::move(a));
      }
      // Cancels of running requests: free their pages now.
      for (auto it = running_.begin(); it != running_.end();) {
        if ((*it)->stream->cancel_requested()) {
          end(**it, (*it)->stream->cancel_reason());
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      max_running_ = std::max(max_running_, running_.size());
      try {
        prefill_round(logits);
        decode_round(logits, rows, row_lanes, one_token);
      } catch (std::exception const& e) {
        fail_all(fmt::format("tf: forward failed: {}", e.what()));
      }
      std::erase_if(running_, [](auto const& l) { return l->stream_done; });
      {
        std::lock_guard lock(mutex_);
        ++rounds_;
        publish_locked();
      }
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
      ensure_pages(l, l.pos + n);
      batch_row row{std::span<std::int32_t const>(l.req.prompt).subspan(l.pos, n),
                    static_cast<std::int32_t>(l.pos), l.pages, false};
      logits.resize(model_.vocab_size());
      model_.forward(std::span<batch_row const>(&row, 1), logits.data());
      l.pos += n;
      if (l.pos == l.req.prompt.size()) {
        auto r = l.sampler->sample(logits, l.history);
        emit(l, std::move(r));
      }
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
      ensure_pages(l, l.pos + 1);
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
      auto r = l.sampler->sample(row, l.history);
      emit(l, std::move(r));
    }
  }

  void publish_locked() {
    auto c = pool_.count();
    census_ = c;
    running_count_ = running_.size();
    snapshot_.running = running_.size();
    snapshot_.queued = waiting_.size();
    snapshot_.requeued = 0;
    snapshot_.pages_free = c.free;
    snapshot_.pages_held = c.held;
    snapshot_.pages_promised = c.promised;
    snapshot_.pages_store = c.store;
    snapshot_.pages_total = c.total;
    snapshot_.slots = cfg_.parallel;
    snapshot_.slots_free = cfg_.parallel - std::min(cfg_.parallel, running_.size());
    snapshot_.max_running_seen = max_running_;
    snapshot_.rounds = rounds_;
  }

  Model& model_;
  lane_config cfg_;
  metrics own_metrics_;
  metrics* metrics_;
  detail::page_admission pool_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<lane>> waiting_;
  std::size_t running_count_ = 0;
  bool stopping_ = false;
  clock::time_point drain_deadline_{};
  load_snapshot snapshot_;
  census census_;
  std::uint64_t rounds_ = 0;
  std::size_t max_running_ = 0;

  std::vector<std::unique_ptr<lane>> running_;  // engine thread only
  std::thread engine_;
};

}  // namespace tf::serve
