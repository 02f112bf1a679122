// Tests include/tf/kv/slots.hpp: free + held, promises, bad returns.
#include <tf/kv/slots.hpp>

#include <catch2/catch.hpp>

TEST_CASE("slots are taken and given back; promises are bounded by the total") {
  tf::kv::slots s(3);
  CHECK(s.fits(3));
  CHECK_FALSE(s.fits(4));
  s.promise(2);
  CHECK_FALSE(s.fits(2));
  auto a = s.take();
  auto b = s.take();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(*a != *b);
  CHECK(s.free_count() + s.held_count() == s.total());
  CHECK(s.held_count() == 2);
  s.give_back(*a);
  CHECK_THROWS_AS(s.give_back(*a), tf::error);  // not held any more
  CHECK_THROWS_AS(s.give_back(7), tf::error);
  CHECK_THROWS_AS(s.promise(2), tf::error);
  s.unpromise(2);
  CHECK_THROWS_AS(s.unpromise(1), tf::error);
  CHECK(s.take());
  CHECK(s.take());
  CHECK_FALSE(s.take());
  CHECK_THROWS_AS(tf::kv::slots(-1), tf::error);
}
