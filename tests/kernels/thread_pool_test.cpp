// Tests kernels/cpu/thread_pool.hpp.
#include <kernels/cpu/thread_pool.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace cpu = tf::kernels::cpu;

TEST_CASE("parallel_for covers every item exactly once with static chunks", "[thread_pool]") {
  for (int threads : {1, 2, 3, 5}) {
    cpu::thread_pool pool(threads);
    CHECK(pool.size() == threads);
    for (std::int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      for (int rep = 0; rep < 50; ++rep)
        pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
        });
      for (auto& h : hits) REQUIRE(h.load() == 50);
    }
  }
}

TEST_CASE("parallel_for's chunks are the static ones, whichever thread claims them",
          "[thread_pool]") {
  // Workers asleep or late leave their chunks to the caller; the ranges stay chunk()'s.
  using namespace std::chrono_literals;
  for (int threads : {2, 3}) {
    cpu::thread_pool pool(threads);
    for (int round = 0; round < 6; ++round) {
      if (round % 2 == 0) std::this_thread::sleep_for(5ms);
      std::vector<std::atomic<std::int64_t>> ends(static_cast<std::size_t>(threads));
      for (auto& e : ends) e = -1;
      pool.parallel_for(10, [&](std::int64_t b, std::int64_t e) {
        for (int i = 0; i < threads; ++i) {
          std::int64_t cb = 0, ce = 0;
          cpu::thread_pool::chunk(10, threads, i, cb, ce);
          if (cb == b) ends[static_cast<std::size_t>(i)] = e;
        }
      });
      for (int i = 0; i < threads; ++i) {
        std::int64_t cb = 0, ce = 0;
        cpu::thread_pool::chunk(10, threads, i, cb, ce);
        CHECK(ends[static_cast<std::size_t>(i)] == ce);
      }
    }
  }
}

TEST_CASE("parallel_pieces covers every item exactly once, a piece at a time", "[thread_pool]") {
  for (int threads : {1, 2, 3}) {
    cpu::thread_pool pool(threads);
    for (std::int64_t n : {0, 1, 15, 16, 17, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      std::atomic<bool> oversized{false}, misaligned{false};
      for (int rep = 0; rep < 20; ++rep)
        pool.parallel_pieces(n, 16, [&](std::int64_t b, std::int64_t e) {
          if (e - b > 16 || e <= b) oversized = true;
          if (b % 16 != 0) misaligned = true;
          for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
        });
      for (auto& h : hits) REQUIRE(h.load() == 20);
      CHECK(!oversized);
      CHECK(!misaligned);
    }
  }
  cpu::thread_pool pool(2);
  CHECK_THROWS_AS(pool.parallel_pieces(64, 4,
                                       [](std::int64_t b, std::int64_t) {
                                         if (b == 32) throw std::runtime_error("piece 8");
                                       }),
                  std::runtime_error);
}

TEST_CASE("chunks depend only on the item and thread counts", "[thread_pool]") {
  std::int64_t covered = 0;
  for (int i = 0; i < 3; ++i) {
    std::int64_t b = 0, e = 0;
    cpu::thread_pool::chunk(10, 3, i, b, e);
    CHECK(b == covered);
    covered = e;
  }
  CHECK(covered == 10);
}

TEST_CASE("an exception in a chunk reaches the caller and the pool keeps working",
          "[thread_pool]") {
  cpu::thread_pool pool(3);
  CHECK_THROWS_AS(pool.parallel_for(9,
                                    [](std::int64_t b, std::int64_t) {
                                      if (b > 0) throw std::runtime_error("chunk failed");
                                    }),
                  std::runtime_error);
  std::atomic<std::int64_t> sum = 0;
  pool.parallel_for(100, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) sum += i;
  });
  CHECK(sum == 4950);
}

TEST_CASE("workers that went to sleep wake for the next call, and a slow chunk is waited for",
          "[thread_pool]") {
  using namespace std::chrono_literals;
  for (int threads : {2, 3}) {
    cpu::thread_pool pool(threads);
    for (int round = 0; round < 4; ++round) {
      // Longer than any spin: the workers (and then the caller) sleep between and during calls.
      std::this_thread::sleep_for(20ms);
      std::vector<int> hits(30, 0);
      pool.parallel_for(30, [&](std::int64_t b, std::int64_t e) {
        if (b > 0) std::this_thread::sleep_for(10ms);
        for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
      });
      CHECK(std::count(hits.begin(), hits.end(), 1) == 30);
    }
    // Back-to-back calls after the sleeps still see every item once.
    std::atomic<std::int64_t> sum = 0;
    for (int i = 0; i < 2000; ++i)
      pool.parallel_for(8, [&](std::int64_t b, std::int64_t e) { sum += e - b; });
    CHECK(sum == 16000);
  }
  // A pool destroyed while its workers sleep joins them.
  auto idle = std::make_unique<cpu::thread_pool>(4);
  std::this_thread::sleep_for(20ms);
  idle.reset();
  CHECK(idle == nullptr);
}
