#pragma once
/// A persistent thread pool: workers are created once; parallel_for splits [0, n) statically.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tf::kernels::cpu {

/// Fixed set of worker threads; the calling thread takes part as worker 0.
class thread_pool {
 public:
  /// `n_threads` workers in all (including the caller); at least 1.
  explicit thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    workers_.reserve(static_cast<std::size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { run(); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    generation_.notify_all();
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
  /// done and rethrows the first exception a chunk threw. Not re-entrant from inside fn. The
  /// chunks are claimed in turn, so one whose worker has not started yet (the host gave its core
  /// to another process) is run by the caller instead of waited for; which thread runs a chunk
  /// varies, its range does not.
  template <class Fn>
  void parallel_for(std::int64_t n_items, Fn&& fn) {
    if (n_items <= 0) return;
    if (n_threads_ == 1 || n_items == 1) {
      fn(std::int64_t{0}, n_items);
      return;
    }
    using F = std::remove_reference_t<Fn>;
    auto call = [](void* ctx, std::int64_t b, std::int64_t e) { (*static_cast<F*>(ctx))(b, e); };
    // A thread reads these only after claiming a chunk of this call, and the last call's chunks
    // are all done (done_ reached n_threads_), so no lock is needed.
    task_ = call;
    ctx_ = static_cast<void*>(&fn);
    n_items_ = n_items;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    // Only this thread (and the destructor, after the last call) moves the generation.
    const std::uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
    next_chunk_.store(std::uint64_t{g} << 32, std::memory_order_release);
    generation_.store(g, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
    run_chunks(g);
    // Spin while the claimed chunks finish (static chunks end together), then sleep.
    spin_while([&] { return done_.load(std::memory_order_acquire) != n_threads_; });
    for (;;) {
      int d = done_.load(std::memory_order_acquire);
      if (d == n_threads_) break;
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      d = done_.load(std::memory_order_seq_cst);
      if (d != n_threads_) done_.wait(d, std::memory_order_acquire);
      caller_sleeping_.store(false, std::memory_order_relaxed);
    }
    if (error_) std::rethrow_exception(error_);
  }

  /// Runs fn(begin, end) over [0, n_items) in pieces of `piece` items that each thread claims in
  /// turn, so a thread the host slows down does not hold the others up; which thread runs a piece
  /// varies, so fn's result for an item must not depend on it.
  template <class Fn>
  void parallel_pieces(std::int64_t n_items, std::int64_t piece, Fn&& fn) {
    if (n_items <= 0) return;
    if (piece < 1) piece = 1;
    std::atomic<std::int64_t> next{0};
    parallel_for(n_threads_, [&](std::int64_t, std::int64_t) {
      for (;;) {
        const std::int64_t begin = next.fetch_add(piece, std::memory_order_relaxed);
        if (begin >= n_items) return;
        fn(begin, begin + piece < n_items ? begin + piece : n_items);
      }
    });
  }

 private:
  // How long a waiting thread spins before it sleeps. Longer than the gap between two decode
  // steps (sampling, streaming the text): waking a sleeping worker costs tens of microseconds.
  static constexpr std::chrono::microseconds spin_budget{2000};

  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
  }

  // Spins while busy() holds, for up to spin_budget (a pause takes from a few to over a hundred
  // cycles by CPU, so the budget is time, read every 64 pauses).
  template <class Busy>
  static void spin_while(Busy&& busy) {
    const auto until = std::chrono::steady_clock::now() + spin_budget;
    for (int spin = 1; busy(); ++spin) {
      relax();
      if (spin % 64 == 0 && std::chrono::steady_clock::now() > until) return;
    }
  }

  void run_chunk(int i) {
    std::int64_t b = 0, e = 0;
    chunk(n_items_, n_threads_, i, b, e);
    if (b >= e) return;
    try {
      task_(ctx_, b, e);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  // Claims and runs chunks of call `g` until none is left; nothing if that call has moved on.
  void run_chunks(std::uint32_t g) {
    for (;;) {
      std::uint64_t c = next_chunk_.load(std::memory_order_acquire);
      do {
        if (c >> 32 != g || static_cast<int>(c & 0xffffffffu) >= n_threads_) return;
      } while (!next_chunk_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                                  std::memory_order_acquire));
      run_chunk(static_cast<int>(c & 0xffffffffu));
      if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == n_threads_ &&
          caller_sleeping_.load(std::memory_order_seq_cst))
        done_.notify_one();
    }
  }

  void run() {
    std::uint32_t seen = 0;
    for (;;) {
      std::uint32_t g = 0;
      spin_while([&] { return (g = generation_.load(std::memory_order_acquire)) == seen; });
      while (g == seen) {
        // Announce the sleep before the last look, so parallel_for either sees a sleeper and
        // notifies or its new generation is seen here.
        sleeping_.fetch_add(1, std::memory_order_seq_cst);
        if (generation_.load(std::memory_order_seq_cst) == seen)
          generation_.wait(seen, std::memory_order_acquire);
        sleeping_.fetch_sub(1, std::memory_order_relaxed);
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_.load(std::memory_order_relaxed)) return;
      run_chunks(g);
    }
  }

  int n_threads_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint32_t> generation_{0};
  // The call's generation (high half) and its next unclaimed chunk (low half).
  std::atomic<std::uint64_t> next_chunk_{0};
  std::atomic<int> done_{0};  // chunks of the current call finished
  std::atomic<int> sleeping_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  void (*task_)(void*, std::int64_t, std::int64_t) = nullptr;
  void* ctx_ = nullptr;
  std::int64_t n_items_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace tf::kernels::cpu
