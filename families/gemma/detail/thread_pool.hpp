#pragma once
/// A small persistent thread pool for the Gemma forward: static contiguous partitions, so every
/// output element is computed by exactly one thread in the same order whatever the thread count.
#include <tf/error.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace tf::families::gemma::detail {

/// Runs `fn(begin, end)` over [0, n) split into one contiguous chunk per thread.
class thread_pool {
 public:
  explicit thread_pool(int threads) {
    if (threads < 1 || threads > 1024)
      throw error("tf: gemma thread_pool wants 1..1024 threads, got {}", threads);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  thread_pool(thread_pool const&) = delete;
  thread_pool& operator=(thread_pool const&) = delete;
  ~thread_pool() {
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (auto& w : workers_) w.join();
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  template <class F>
  void run(std::int64_t n, F&& fn) {
    if (n <= 0) return;
    int const t = size();
    if (t == 1 || n == 1) {
      fn(std::int64_t{0}, n);
      return;
    }
    n_ = n;
    task_ = [&fn](std::int64_t b, std::int64_t e) { fn(b, e); };
    pending_.store(t - 1);
    generation_.fetch_add(1);
    generation_.notify_all();
    chunk(0, fn);
    while (pending_.load() != 0) std::this_thread::yield();
  }

 private:
  template <class F>
  void chunk(int i, F& fn) {
    std::int64_t const t = size();
    std::int64_t const b = n_ * i / t, e = n_ * (i + 1) / t;
    if (b < e) fn(b, e);
  }

  void work(int i) {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t g = generation_.load();
      for (int spin = 0; g == seen && spin < 20000; ++spin) {
        std::this_thread::yield();
        g = generation_.load();
      }
      if (g == seen) {
        generation_.wait(seen);
        continue;
      }
      seen = g;
      if (stop_.load()) return;
      chunk(i, task_);
      pending_.fetch_sub(1);
    }
  }

  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::int64_t n_ = 0;
  std::function<void(std::int64_t, std::int64_t)> task_;
};

}  // namespace tf::families::gemma::detail
