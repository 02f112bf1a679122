// Tests kernels/cpu/thread_pool.hpp.
#include <kernels/cpu/thread_pool.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
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
