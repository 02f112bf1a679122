// Tests include/tf/kv/prompt_store.hpp: prefix matching and least-recently-used order.
#include <tf/kv/prompt_store.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

using tokens = std::vector<std::int32_t>;

TEST_CASE("best match gives the longest usable prefix, in whole pages") {
  tf::kv::prompt_store s;
  auto a = s.add(tokens{1, 2, 3, 4, 5, 6, 7, 8}, {10, 11}, -1);
  auto b = s.add(tokens{1, 2, 9, 9}, {12}, -1);
  tokens p{1, 2, 3, 4, 5, 6, 0, 0, 0};
  auto m = s.best(p, 8, {4, false});
  REQUIRE(m);
  CHECK(m->entry == a);
  CHECK(m->tokens == 4);  // 6 common tokens, one whole page of 4
  auto any = s.best(p, 8, {0, false});
  REQUIRE(any);
  CHECK(any->tokens == 6);
  auto capped = s.best(p, 3, {0, false});
  REQUIRE(capped);
  CHECK(capped->tokens == 3);
  CHECK_FALSE(s.best(tokens{7, 7, 7}, 2, {0, false}));
  // Whole-only (a recurrent state exists only at the entry's end, and only where it kept one).
  CHECK_FALSE(s.best(p, 8, {4, true}));
  CHECK_FALSE(s.best(tokens{1, 2, 9, 9, 5}, 4, {4, true}));  // b kept no state
  auto c = s.add(tokens{1, 2, 9, 9}, {12}, 3);
  auto w = s.best(tokens{1, 2, 9, 9, 5}, 4, {4, true});
  REQUIRE(w);
  CHECK(w->entry == c);
  CHECK(w->tokens == 4);
  CHECK(s.best(tokens{1, 2, 9, 9, 5}, 4, {0, false})->tokens == 4);
  CHECK(b != c);
}

TEST_CASE("covering: a longer entry without a state gives all a shorter one would") {
  tf::kv::prompt_store s;
  auto shorter = s.add(tokens{1, 2, 3}, {10}, -1);
  auto stateful = s.add(tokens{1, 2}, {10}, 5);
  CHECK(s.find_covering(tokens{1, 2}) == shorter);
  CHECK_FALSE(s.find_covering(tokens{1, 2, 3, 4}));
  auto covered = s.covered_by(tokens{1, 2, 3, 4});
  REQUIRE(covered.size() == 1);  // the entry with a state keeps its own reuse point
  CHECK(covered[0] == shorter);
  CHECK(s.covered_by(tokens{1, 2, 3}).empty());  // equal is not covered
  CHECK(tf::kv::is_prefix(tokens{1, 2}, tokens{1, 2, 3}));
  CHECK_FALSE(tf::kv::is_prefix(tokens{1, 3}, tokens{1, 2, 3}));
  CHECK(stateful != shorter);
}

TEST_CASE("the least recently used entry goes first; touching makes it recent") {
  tf::kv::prompt_store s;
  auto a = s.add(tokens{1}, {}, -1);
  auto b = s.add(tokens{2}, {}, -1);
  auto c = s.add(tokens{3}, {}, 4);
  CHECK(s.lru() == a);
  s.touch(a);
  CHECK(s.lru() == b);
  auto e = s.remove(b);
  CHECK(e.tokens == tokens{2});
  CHECK(s.lru() == c);
  CHECK(s.get(c).slot == 4);
  CHECK(s.find_exact(tokens{1}) == a);
  CHECK_FALSE(s.find_exact(tokens{2}));
  CHECK_THROWS_AS(s.remove(b), tf::error);
  CHECK(s.size() == 2);
}
