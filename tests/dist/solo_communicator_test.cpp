// tf::dist::solo_communicator: TP=1's collectives without MPI.
#include <tf/dist/solo_communicator.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

static_assert(tf::dist::host_communicator<tf::dist::solo_communicator>);

TEST_CASE("dist/solo_communicator is one rank whose collectives keep or copy", "[dist]") {
  tf::dist::solo_communicator c;
  CHECK(c.rank() == 0);
  CHECK(c.size() == 1);
  std::vector<float> x = {1.5f, -2.0f, 3.25f};
  c.all_reduce_sum(x);
  CHECK(x == std::vector<float>{1.5f, -2.0f, 3.25f});
  std::vector<float> out(3);
  c.all_gather(std::span<float const>(x), std::span<float>(out));
  CHECK(out == x);
  std::vector<std::byte> bytes = {std::byte{7}, std::byte{9}}, gathered(2);
  c.all_gather(std::span<std::byte const>(bytes), std::span<std::byte>(gathered));
  CHECK(gathered == bytes);
  c.broadcast(bytes, 0);
  CHECK(bytes.size() == 2);
  c.barrier();
  CHECK(c.all_reduce_min(-42) == -42);
}

TEST_CASE("dist/solo_communicator refuses what one rank cannot do", "[dist]") {
  tf::dist::solo_communicator c;
  std::vector<std::byte> bytes(4);
  CHECK_THROWS_WITH(c.broadcast(bytes, 1), Catch::Contains("broadcast from rank 1"));
  std::vector<float> in(3), out(4);
  CHECK_THROWS_WITH(c.all_gather(std::span<float const>(in), std::span<float>(out)),
                    Catch::Contains("4 elements out for 3 in"));
}
