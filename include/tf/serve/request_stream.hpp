#pragma once
/// What a client sends the lane host and reads back: the request, its token stream, why it ended
/// or was refused.
#include <tf/sample/sampler.hpp>
#include <tf/serve/lane_admission.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace tf::serve {

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
  bool reuse_prefix = true;               // false: no kept prefix, the whole prompt runs
  bool draft = true;  // false: no speculative drafts for this request (the reply is the same)
  // >= 0: score the prompt (each token after the first: its logprob and this many of the most
  // likely alternatives), from logits of the prompt run afresh; -1: no prompt logprobs.
  int prompt_logprobs = -1;
  // Another choice of the same prompt, submitted before this one: this request waits for its
  // prompt's pages and reuses them (one prefill for n choices), where the pool can share pages.
  std::shared_ptr<class request_stream> prefill_leader;
};

/// The client side of one request: tokens arrive from the engine thread, cancel() goes back.
class request_stream {
 public:
  /// One wait's worth of output.
  struct chunk {
    std::vector<sample::sample_result> tokens;
    std::vector<sample::sample_result> prompt;  // scored prompt tokens, in order from the second
    bool done = false;
    finish_reason reason = finish_reason::length;
    std::string error;
  };

  /// Waits up to `timeout` for tokens or the end; returns what arrived (maybe nothing).
  chunk next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, timeout,
                 [&] { return !pending_.empty() || !pending_prompt_.empty() || done_; });
    chunk c;
    c.tokens.swap(pending_);
    c.prompt.swap(pending_prompt_);
    c.done = done_;
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
  /// Prompt tokens whose KV came from the prompt store (usage's cached_tokens), once started.
  std::size_t cached_tokens() const { return cached_tokens_.load(); }

  // Engine side.
  void push(sample::sample_result r) {
    {
      std::lock_guard lock(mutex_);
      pending_.push_back(std::move(r));
    }
    cv_.notify_all();
  }
  void push_prompt(std::span<sample::sample_result> scored) {
    {
      std::lock_guard lock(mutex_);
      for (auto& r : scored) pending_prompt_.push_back(std::move(r));
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
  void set_cached_tokens(std::size_t n) { cached_tokens_.store(n); }
  void add_drafts(std::size_t drafted, std::size_t accepted) {
    drafted_tokens_ += drafted;
    accepted_tokens_ += accepted;
  }
  /// Tokens drafted for this request, and how many of them the target accepted.
  std::size_t drafted_tokens() const { return drafted_tokens_.load(); }
  std::size_t accepted_tokens() const { return accepted_tokens_.load(); }
  std::size_t prompt_tokens_ = 0;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<sample::sample_result> pending_;
  std::vector<sample::sample_result> pending_prompt_;
  bool done_ = false;
  finish_reason reason_ = finish_reason::length;
  std::string error_;
  std::atomic<bool> cancel_{false};
  std::atomic<std::size_t> cached_tokens_{0};
  std::atomic<std::size_t> drafted_tokens_{0}, accepted_tokens_{0};
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

}  // namespace tf::serve
