// tf::dist::mpi_communicator under mpirun (-n 2 over shared memory, -n 3 over TCP on loopback;
// tests/dist/CMakeLists.txt). Every rank runs every case in the same order.
#define CATCH_CONFIG_RUNNER
#include <tf/dist/mpi_communicator.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using tf::dist::mpi_communicator;

static_assert(tf::dist::host_communicator<mpi_communicator>);

// Rank r's element i: mixed magnitudes and signs, so the order of a sum shows in its bits.
float value(int rank, std::size_t i) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ (rank + 1) * 40503u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  float const mantissa = static_cast<float>(h % 1000003) / 1000003.0f - 0.5f;
  return std::ldexp(mantissa, static_cast<int>(h % 41) - 20);
}

std::vector<float> values(int rank, std::size_t n, std::size_t first = 0) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = value(rank, first + i);
  return x;
}

bool same_bits(std::span<float const> a, std::span<float const> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Every rank's copy of `x`, compared with this rank's bit for bit.
bool equal_on_every_rank(mpi_communicator& c, std::span<float const> x) {
  std::vector<float> all(x.size() * static_cast<std::size_t>(c.size()));
  c.all_gather(x, std::span<float>(all));
  for (int r = 0; r < c.size(); ++r)
    if (!same_bits(x, std::span<float const>(all).subspan(r * x.size(), x.size()))) return false;
  return true;
}

}  // namespace

TEST_CASE("dist/mpi: ranks and sizes agree", "[dist][mpi]") {
  mpi_communicator c;
  REQUIRE(c.size() >= 2);
  REQUIRE(c.rank() >= 0);
  REQUIRE(c.rank() < c.size());
  std::int32_t const mine = c.rank();
  std::vector<std::int32_t> all(c.size());
  c.all_gather(std::as_bytes(std::span<std::int32_t const>(&mine, 1)),
               std::as_writable_bytes(std::span<std::int32_t>(all)));
  for (int r = 0; r < c.size(); ++r) CHECK(all[r] == r);
  CHECK_FALSE(c.host(c.rank()).empty());
}

TEST_CASE("dist/mpi: all_reduce_sum is the rank-order sum, bit for bit, on every rank",
          "[dist][mpi]") {
  mpi_communicator c;
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{640}, std::size_t{5120 * 8}}) {
    std::vector<float> x = values(c.rank(), n);
    c.all_reduce_sum(x);
    std::vector<float> expected = values(0, n);
    for (int r = 1; r < c.size(); ++r) {
      std::vector<float> const y = values(r, n);
      for (std::size_t i = 0; i < n; ++i) expected[i] = expected[i] + y[i];
    }
    INFO("n = " << n);
    CHECK(same_bits(x, expected));
    CHECK(equal_on_every_rank(c, x));
  }
}

TEST_CASE("dist/mpi: the sum order is the ranks', shown on crafted values", "[dist][mpi]") {
  mpi_communicator c;
  // Rank 0: 1, rank 1: 1e8, rank 2: -1e8, others 0. In rank order 1 + 1e8 rounds to 1e8 and the
  // sum is 0; summed from the last rank down it is 1.
  auto crafted = [](int r) { return r == 0 ? 1.0f : r == 1 ? 1e8f : r == 2 ? -1e8f : 0.0f; };
  std::vector<float> x = {crafted(c.rank())};
  c.all_reduce_sum(x);
  float forward = crafted(0), reverse = crafted(c.size() - 1);
  for (int r = 1; r < c.size(); ++r) forward = forward + crafted(r);
  for (int r = c.size() - 2; r >= 0; --r) reverse = reverse + crafted(r);
  CHECK(same_bits(x, std::vector<float>{forward}));
  if (c.size() >= 3) {
    CHECK(x[0] == 0.0f);
    CHECK(reverse == 1.0f);
  } else {
    CHECK(forward == reverse);  // two ranks: a + b == b + a, so no order can show
  }
}

TEST_CASE("dist/mpi: an element's bits do not depend on the message size", "[dist][mpi]") {
  mpi_communicator c;
  std::size_t const n = 4096;
  std::vector<float> whole = values(c.rank(), n);
  c.all_reduce_sum(whole);
  // The same elements as one-element messages and as two uneven halves.
  for (std::size_t i : {std::size_t{0}, std::size_t{1000}, n - 1}) {
    std::vector<float> one = values(c.rank(), 1, i);
    c.all_reduce_sum(one);
    CHECK(same_bits(one, std::span<float const>(whole).subspan(i, 1)));
  }
  std::vector<float> head = values(c.rank(), 1001), tail = values(c.rank(), n - 1001, 1001);
  c.all_reduce_sum(head);
  c.all_reduce_sum(tail);
  CHECK(same_bits(head, std::span<float const>(whole).first(1001)));
  CHECK(same_bits(tail, std::span<float const>(whole).subspan(1001)));
}

TEST_CASE("dist/mpi: all_gather puts rank r's block at r", "[dist][mpi]") {
  mpi_communicator c;
  std::vector<float> const mine = values(c.rank(), 33);
  std::vector<float> all(33 * c.size());
  c.all_gather(std::span<float const>(mine), std::span<float>(all));
  for (int r = 0; r < c.size(); ++r)
    CHECK(same_bits(std::span<float const>(all).subspan(r * 33, 33), values(r, 33)));
  std::vector<std::byte> empty_out;
  c.all_gather(std::span<std::byte const>(), std::span<std::byte>(empty_out));
  std::vector<float> wrong(5);
  CHECK_THROWS_WITH(c.all_gather(std::span<float const>(mine), std::span<float>(wrong)),
                    Catch::Contains("5 elements out for 33 in"));
}

TEST_CASE("dist/mpi: broadcast from every root, fixed and root-sized", "[dist][mpi]") {
  mpi_communicator c;
  for (int root = 0; root < c.size(); ++root) {
    std::vector<std::byte> fixed(100, std::byte(c.rank()));
    c.broadcast(std::span<std::byte>(fixed), root);
    CHECK(
        std::all_of(fixed.begin(), fixed.end(), [&](std::byte b) { return b == std::byte(root); }));
    // Root's size wins: 1000 + root bytes, the others start with a size of their own.
    std::vector<std::byte> sized(c.rank() == root ? 1000 + root : 3 * c.rank());
    if (c.rank() == root)
      for (std::size_t i = 0; i < sized.size(); ++i) sized[i] = std::byte(i * 7 + root);
    c.broadcast(sized, root);
    REQUIRE(sized.size() == std::size_t(1000 + root));
    for (std::size_t i = 0; i < sized.size(); ++i) CHECK(sized[i] == std::byte(i * 7 + root));
  }
  std::vector<std::byte> none(c.rank() == 0 ? 0 : 5);
  c.broadcast(none, 0);
  CHECK(none.empty());
  std::vector<std::byte> any(1);
  CHECK_THROWS_WITH(c.broadcast(any, c.size()), Catch::Contains("the ranks are 0 to"));
}

TEST_CASE("dist/mpi: all_reduce_min gives every rank the smallest", "[dist][mpi]") {
  mpi_communicator c;
  CHECK(c.all_reduce_min(100 - 7 * c.rank()) == 100 - 7 * (c.size() - 1));
  CHECK(c.all_reduce_min(c.rank() == 1 ? -(std::int64_t{1} << 40) : 5) == -(std::int64_t{1} << 40));
}

TEST_CASE("dist/mpi: nobody leaves a barrier before the last rank enters it", "[dist][mpi]") {
  mpi_communicator c;
  c.barrier();
  using clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: one clock for the machine's ranks
  std::this_thread::sleep_for(std::chrono::milliseconds(60 * c.rank()));
  std::int64_t const entered = clock::now().time_since_epoch().count();
  c.barrier();
  std::int64_t const left = clock::now().time_since_epoch().count();
  std::vector<std::int64_t> all(c.size());
  c.all_gather(std::as_bytes(std::span<std::int64_t const>(&entered, 1)),
               std::as_writable_bytes(std::span<std::int64_t>(all)));
  CHECK(left >= *std::max_element(all.begin(), all.end()));
}

TEST_CASE("dist/mpi: ranks that pass different sizes fail naming each other", "[dist][mpi]") {
  mpi_communicator c;
  // Rank 0 sends 4 bytes, the others 8: rank 0 reads a truncated message, the others a short one.
  std::size_t const n = c.rank() == 0 ? 4 : 8;
  std::vector<std::byte> mine(n), all(n * c.size());
  std::string message;
  try {
    c.all_gather(std::span<std::byte const>(mine), std::span<std::byte>(all));
  } catch (tf::error const& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find(c.rank() == 0 ? "from rank " : "rank 0 on") != std::string::npos);
  CHECK_FALSE(c.failure().empty());
  CHECK_THROWS_WITH(c.barrier(), Catch::Contains("failed earlier"));
  CHECK_FALSE(tf::dist::mpi_runtime::peer_failed());  // every peer is alive: MPI still finalises
}

int main(int argc, char** argv) {
  tf::dist::mpi_runtime mpi(&argc, &argv);
  return Catch::Session().run(argc, argv);
}
