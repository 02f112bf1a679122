// tf::dist::rank_order_sum: rank order per element, whatever the message size.
#include <tf/dist/rank_order_sum.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

TEST_CASE("dist/rank_order_sum adds the ranks' blocks in rank order", "[dist]") {
  // Rank 0 then 1 then 2: (1 + 1e8) rounds to 1e8, so the sum is 0; any other order gives 1.
  std::vector<float> const gathered = {1.0f, 2.0f, 1e8f, 3.0f, -1e8f, 4.0f};
  std::vector<float> out(2);
  tf::dist::rank_order_sum(gathered, 3, out);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 9.0f);
  CHECK(((-1e8f + 1e8f) + 1.0f) == 1.0f);  // the reverse order differs on these values
}

TEST_CASE("dist/rank_order_sum: an element's bits do not depend on the message size", "[dist]") {
  int const ranks = 4;
  std::size_t const n = 4099;
  std::vector<float> gathered(ranks * n);
  for (std::size_t i = 0; i < gathered.size(); ++i)
    gathered[i] = static_cast<float>((i * 2654435761u) % 100003) * 1.37e-3f - 60.0f;
  std::vector<float> whole(n);
  tf::dist::rank_order_sum(gathered, ranks, whole);
  for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{17}, n - 1}) {
    std::vector<float> one(ranks);
    for (int r = 0; r < ranks; ++r) one[r] = gathered[r * n + i];
    float alone = 0;
    tf::dist::rank_order_sum(one, ranks, std::span<float>(&alone, 1));
    float const by_hand = ((one[0] + one[1]) + one[2]) + one[3];
    CHECK(std::memcmp(&alone, &whole[i], sizeof(float)) == 0);
    CHECK(std::memcmp(&by_hand, &whole[i], sizeof(float)) == 0);
  }
}

TEST_CASE("dist/rank_order_sum refuses a gathered buffer of the wrong size", "[dist]") {
  std::vector<float> gathered(5), out(2);
  CHECK_THROWS_WITH(tf::dist::rank_order_sum(gathered, 3, out),
                    Catch::Contains("5 gathered floats for 3 ranks of 2"));
}
