#pragma once
/// A persistent thread pool: workers are created once; parallel_for splits [0, n) statically.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tf::kernels::cpu {

/// Fixed set of worker threads; the calling thread takes part as worker 0.
class thread_pool {
 public:
  /// `n_threads` workers in all (including the caller); at least 1.
  explicit thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    workers_.reserve(static_cast<std::size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { run(i); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

  /// Threads that run a parallel_for (including the caller).
  int size() const { return n_threads_; }

  /// The [begin, end) share of worker `i` of `n` for `n_items`: contiguous, fixed by (n_items, n).
  static void chunk(std::int64_t n_items, int n, int i, std::int64_t& begin, std::int64_t& end) {
    begin = n_items * i / n;
    end = n_items * (i + 1) / n;
  }

  /// Runs fn(begin, end) over static chunks of [0, n_items), one per thread; returns when all are
  /// done and rethrows the first exception a chunk threw. Not re-entrant from inside fn.
  template <class Fn>
  void parallel_for(std::int64_t n_items, Fn&& fn) {
    if (n_items <= 0) return;
    if (n_threads_ == 1 || n_items == 1) {
      fn(std::int64_t{0}, n_items);
      return;
    }
    auto call = [](void* ctx, std::int64_t b, std::int64_t e) { (*static_cast<Fn*>(ctx))(b, e); };
    {
      std::lock_guard lock(mutex_);
      task_ = call;
      ctx_ = static_cast<void*>(&fn);
      n_items_ = n_items;
      error_ = nullptr;
      pending_.store(n_threads_ - 1, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    run_chunk(0);
    // Spin briefly (workers finish together with static chunks), then sleep.
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < 20000) continue;
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_chunk(int i) {
    std::int64_t b = 0, e = 0;
    chunk(n_items_, n_threads_, i, b, e);
    if (b >= e) return;
    try {
      task_(ctx_, b, e);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  void run(int i) {
    std::uint64_t seen = 0;
    for (;;) {
      // Spin on the generation first: decode calls come back to back.
      std::uint64_t g = generation_.load(std::memory_order_acquire);
      for (int spin = 0; g == seen && spin < 20000; ++spin)
        g = generation_.load(std::memory_order_acquire);
      if (g == seen) {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      {
        std::lock_guard lock(mutex_);
        if (stop_) return;
      }
      run_chunk(i);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex_);
        done_.notify_one();
      }
    }
  }

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
  void (*task_)(void*, std::int64_t, std::int64_t) = nullptr;
  void* ctx_ = nullptr;
  std::int64_t n_items_ = 0;
  std::exception_ptr error_;
};

}  // namespace tf::kernels::cpu
