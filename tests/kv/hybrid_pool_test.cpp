// Tests include/tf/kv/hybrid_pool.hpp: pages plus recurrent-state slots, admitted together.
#include <tf/kv/hybrid_pool.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

using tokens = std::vector<std::int32_t>;

namespace {
tokens iota(std::int32_t n) {
  tokens t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), 0);
  return t;
}
}  // namespace

TEST_CASE("slots run out before pages: the next promise is refused") {
  tf::kv::hybrid_pool p({{.page_tokens = 16, .total_pages = 100}, 2, 4096});
  CHECK(p.need_for(10) == tf::kv::need{1, 1});
  REQUIRE(p.promise(1, 10));
  REQUIRE(p.promise(2, 10));
  CHECK(p.fits({1, 0}));
  CHECK_FALSE(p.fits({1, 1}));
  CHECK_FALSE(p.promise(3, 10));
  p.start(1, iota(5));
  p.start(2, iota(5));
  CHECK(p.stream_slot(1) != p.stream_slot(2));
  auto c = p.census();
  CHECK(c.slots_held == 2);
  CHECK(c.line() == "promised 2, free 100 + store 0 == total 100; slots free 0 + held 2 == 2");
  p.release(1);
  CHECK(p.promise(3, 10));
  p.release(2);
  p.release(3);
  CHECK(p.census().balanced());
}

TEST_CASE("a kept prompt keeps its slot; it is reclaimed when a stream needs one") {
  tf::kv::hybrid_pool p({{.page_tokens = 4, .total_pages = 8}, 2, 64});
  REQUIRE(p.promise(1, 10));
  p.start(1, iota(9));
  p.hold(1, 10);
  auto k = p.keep(1, iota(9));
  CHECK(k.tokens == 9);
  CHECK(k.slot_kept);
  auto c = p.census();
  CHECK(c.line() == "promised 0, free 5 + store 3 == total 8; slots free 1 + held 1 == 2");
  CHECK(c.slots_store == 1);
  CHECK(c.balanced());
  // The kept slot counts as room: two new streams fit, and the second reclaims it.
  REQUIRE(p.promise(2, 4));
  REQUIRE(p.promise(3, 4));
  p.start(2, tokens{50, 51});
  CHECK(p.store().size() == 1);
  p.start(3, tokens{60, 61});
  CHECK(p.store().empty());
  CHECK(p.census().store == 0);
  p.release(2);
  p.release(3);
  CHECK(p.census().line() == "promised 0, free 8 + store 0 == total 8; slots free 2 + held 0 == 2");
}

TEST_CASE("a hybrid stream reuses a kept prompt only whole, and starts from its state") {
  tf::kv::hybrid_pool p({{.page_tokens = 4, .total_pages = 8}, 3, 64});
  REQUIRE(p.promise(1, 8));
  p.start(1, iota(8));
  p.hold(1, 8);
  p.keep(1, iota(8));
  auto kept_slot = p.store().entries()[0].slot;
  auto longer = iota(8);
  longer.push_back(8);
  REQUIRE(p.promise(2, 12));
  auto r = p.start(2, longer);
  CHECK(r.tokens == 8);
  CHECK(r.slot == kept_slot);
  CHECK(p.stream_slot(2) != kept_slot);  // its own slot; the forward copies the state
  auto diverging = iota(6);
  diverging.push_back(-5);
  REQUIRE(p.promise(3, 12));
  CHECK(p.start(3, diverging).tokens == 0);  // 6 shared tokens, but the state is at 8
}

TEST_CASE("keep_prefix: a prefix of a stream's tokens kept with a slot of its own") {
  tf::kv::hybrid_pool p({{.page_tokens = 4, .total_pages = 8}, 3, 64});
  REQUIRE(p.promise(1, 12));
  p.start(1, iota(6));
  p.hold(1, 9);  // a 6-token prompt and 3 generated tokens
  auto own = *p.stream_slot(1);
  auto at = p.keep_prefix(1, iota(5));  // the state before the prompt's last token
  REQUIRE(at >= 0);
  CHECK(at != own);
  CHECK(p.keep_prefix(1, iota(5)) == -1);  // already kept
  auto k = p.keep(1, iota(9));
  CHECK(k.slot_kept);
  CHECK(p.store().size() == 2);  // a state at 5 and one at 9: neither covers the other
  auto c = p.census();
  CHECK(c.slots_store == 2);
  CHECK(c.balanced());
  // The same prompt again resumes at 5 with the prefix's state; the next turn at 9.
  REQUIRE(p.promise(2, 8));
  auto r = p.start(2, iota(6));
  CHECK(r.tokens == 5);
  CHECK(r.slot == at);
  auto turn = iota(9);
  turn.push_back(70);
  REQUIRE(p.promise(3, 12));
  auto r3 = p.start(3, turn);
  CHECK(r3.tokens == 9);
  CHECK(r3.slot == own);
  // The shared partial pages are copied at the first hold.
  CHECK(p.hold(2, 1));
  CHECK(p.hold(3, 1));
  p.release(2);
  p.release(3);
  // No free slot: nothing is kept (the store keeps what it has).
  CHECK(p.store().size() == 1);  // stream 3 needed a slot: the least recently used entry went
  REQUIRE(p.promise(4, 4));
  p.start(4, tokens{1, 1});
  p.hold(4, 2);
  REQUIRE(p.promise(5, 4));
  p.start(5, tokens{2, 2});
  CHECK(p.slot_set().free_count() == 0);
  CHECK(p.keep_prefix(4, tokens{1}) == -1);
  p.release(4);
  p.release(5);
  CHECK(p.census().balanced());
}
