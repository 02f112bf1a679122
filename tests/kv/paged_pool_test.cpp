// Tests include/tf/kv/paged_pool.hpp: page tables, promises, holds, prefix reuse, reclaim.
#include <tf/kv/paged_pool.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

using tokens = std::vector<std::int32_t>;

namespace {
tokens iota(std::int32_t n, std::int32_t from = 0) {
  tokens t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}
}  // namespace

TEST_CASE("a stream's page table grows as its tokens arrive, within its promise") {
  tf::kv::paged_pool p({.page_tokens = 16, .total_pages = 8});
  CHECK(p.pages_for(0) == 0);
  CHECK(p.pages_for(1) == 1);
  CHECK(p.pages_for(16) == 1);
  CHECK(p.pages_for(17) == 2);
  REQUIRE(p.promise(1, 40));  // 3 pages
  CHECK(p.promised_pages() == 3);
  CHECK(p.page_table(1).empty());
  p.hold(1, 17);
  CHECK(p.page_table(1).size() == 2);
  CHECK(p.held_pages() == 2);
  CHECK(p.free_pages() == 6);
  p.hold(1, 23);
  CHECK(p.page_table(1).size() == 3);
  CHECK_THROWS_AS(p.hold(1, 1), tf::error);  // past the promise of 40 tokens
  REQUIRE(p.promise(2, 16 * 5));
  CHECK_FALSE(p.promise(3, 1));  // 3 + 5 of 8 promised
  CHECK_FALSE(p.fits(1));
  p.hold(2, 80);
  std::set<std::int32_t> ids(p.page_table(1).begin(), p.page_table(1).end());
  ids.insert(p.page_table(2).begin(), p.page_table(2).end());
  CHECK(ids.size() == 8);  // no page belongs to two streams
  CHECK(*ids.rbegin() == 7);
  p.release(1);
  CHECK(p.fits(3));
  CHECK_FALSE(p.fits(4));
  p.release(2);
  CHECK(p.census().balanced());
  CHECK(p.census().line() == "promised 0, free 8 + store 0 == total 8");
}

TEST_CASE("bad shapes and bad calls throw") {
  CHECK_THROWS_AS(tf::kv::paged_pool({.page_tokens = -1, .total_pages = 8}), tf::error);
  CHECK_THROWS_AS(tf::kv::paged_pool({.page_tokens = 0, .total_pages = 8}), tf::error);
  tf::kv::paged_pool p({.page_tokens = 16, .total_pages = 2});
  CHECK_THROWS_AS(p.promise(1, 0), tf::error);
  CHECK_FALSE(p.promise(1, 33));  // larger than the whole pool
  CHECK_FALSE(p.can_ever_fit(33));
  REQUIRE(p.promise(1, 10));
  CHECK_THROWS_AS(p.promise(1, 10), tf::error);
  CHECK_THROWS_AS(p.release(9), tf::error);
  CHECK_THROWS_AS(p.hold(9, 1), tf::error);
  CHECK_THROWS_AS(p.page_table(9), tf::error);
  CHECK_THROWS_AS(p.hold(1, -1), tf::error);
}

TEST_CASE("a kept sequence's pages are shared at any token count; a shared last page is copied") {
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 10});
  auto prompt = iota(10);
  REQUIRE(p.promise(1, 12));
  p.hold(1, 12);
  auto first = std::vector<std::int32_t>(p.page_table(1).begin(), p.page_table(1).end());
  auto k = p.keep(1, prompt);
  CHECK(k.tokens == 10);  // what the stream wrote, to the token
  CHECK(k.new_entry);
  CHECK(p.store_pages() == 3);
  CHECK(p.free_pages() == 7);
  CHECK(p.fits(10));  // kept pages are reclaimable, so they count as room

  auto next = iota(9);
  next.push_back(99);  // shares 9 tokens with the kept sequence
  REQUIRE(p.promise(2, 20));
  auto r = p.start(2, next);
  CHECK(r.tokens == 9);
  CHECK_FALSE(r.took_over);
  REQUIRE(p.page_table(2).size() == 3);
  CHECK(std::ranges::equal(p.page_table(2), first));  // the third page too, until written
  CHECK(p.store_pages() == 0);                        // shared pages are held
  CHECK(p.held_pages() == 3);
  CHECK(p.stream_tokens(2) == 9);
  // Writing token 9 goes into the third page: the stream gets a copy of it first.
  auto copy = p.hold(2, 2);
  REQUIRE(copy);
  CHECK(copy->from == first[2]);
  CHECK(copy->to != first[2]);
  REQUIRE(p.page_table(2).size() == 3);
  CHECK(p.page_table(2)[2] == copy->to);
  CHECK(p.page_table(2)[1] == first[1]);
  CHECK(p.held_pages() == 3);
  CHECK(p.store_pages() == 1);  // the kept third page is the store's alone again
  CHECK_FALSE(p.hold(2, 1));    // copied once

  REQUIRE(p.promise(3, 12));  // a third stream shares the same pages
  CHECK(p.start(3, next).tokens == 9);
  CHECK(p.held_pages() == 4);
  p.release(2);
  CHECK(p.held_pages() == 3);  // stream 3 still holds the shared pages
  p.release(3);
  CHECK(p.store_pages() == 3);  // back to the store alone
  CHECK(p.store().size() == 1);
  auto c = p.census();
  CHECK(c.balanced());
  CHECK(c.free + c.store == c.total);
}

TEST_CASE("a prefix that ends on a page boundary shares whole pages and copies nothing") {
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 8});
  REQUIRE(p.promise(1, 8));
  p.hold(1, 8);
  p.keep(1, iota(8));
  auto next = iota(8);
  next.push_back(50);
  REQUIRE(p.promise(2, 10));
  CHECK(p.start(2, next).tokens == 8);
  CHECK(p.page_table(2).size() == 2);
  CHECK_FALSE(p.hold(2, 1));
  CHECK(p.page_table(2).size() == 3);
  p.release(2);
  CHECK(p.census().balanced());
}

TEST_CASE("a shared last page whose entry was evicted meanwhile is taken over, not copied") {
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 3});
  REQUIRE(p.promise(1, 6));
  p.hold(1, 6);
  p.keep(1, iota(6));
  auto next = iota(6);
  next.push_back(7);
  REQUIRE(p.promise(2, 12));
  CHECK(p.start(2, next).tokens == 6);
  auto shared = p.page_table(2)[1];
  CHECK(p.evict_lru());       // the store lets go of the entry; stream 2 alone holds its pages
  CHECK_FALSE(p.hold(2, 1));  // no one else refers to the page: written in place
  CHECK(p.page_table(2)[1] == shared);
  p.release(2);
  CHECK(p.census().balanced());
}

TEST_CASE("with no page free, copying a shared last page reclaims the store first") {
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 4});
  REQUIRE(p.promise(1, 6));
  p.hold(1, 6);
  p.keep(1, iota(6));  // 2 pages
  REQUIRE(p.promise(9, 8));
  p.hold(9, 8);
  p.keep(9, iota(8, 500));  // 2 more: every page is in the store
  CHECK(p.free_pages() == 0);
  auto next = iota(6);
  next.push_back(7);
  REQUIRE(p.promise(2, 8));
  CHECK(p.start(2, next).tokens == 6);
  REQUIRE(p.promise(3, 8));
  CHECK(p.start(3, next).tokens == 6);  // two streams share the partial page
  auto c2 = p.hold(2, 1);
  REQUIRE(c2);  // stream 3 still shares it, so stream 2 copies; the store gave a page
  CHECK(p.store().size() == 1);
  CHECK(p.store().entries()[0].tokens[0] == 0);  // the least recently used entry went
  auto c3 = p.hold(3, 1);
  CHECK(c3);  // the entry still refers to the page: copied as well
  p.release(2);
  p.release(3);
  CHECK(p.census().balanced());
}

TEST_CASE("a prompt never reuses all of itself: the forward needs one token to run") {
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 4});
  auto prompt = iota(8);
  REQUIRE(p.promise(1, 8));
  p.hold(1, 8);
  p.keep(1, prompt);
  REQUIRE(p.promise(2, 9));
  CHECK(p.start(2, prompt).tokens == 7);  // all but the last token
}

TEST_CASE("keeping the same tokens twice keeps one entry; a longer sequence covers a prefix") {
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 8});
  auto prompt = iota(9);
  for (std::uint64_t id = 1; id <= 2; ++id) {
    REQUIRE(p.promise(id, 9));
    p.start(id, prompt);
    p.hold(id, 9 - p.stream_tokens(id));
    auto k = p.keep(id, prompt);
    CHECK(k.tokens == 9);
    CHECK(k.new_entry == (id == 1));
  }
  CHECK(p.store().size() == 1);
  CHECK(p.store_pages() == 3);
  // A chat's next turn: the whole earlier sequence, then more. Its entry replaces the shorter.
  auto longer = iota(13);
  REQUIRE(p.promise(3, 13));
  CHECK(p.start(3, longer).tokens == 9);
  p.hold(3, 4);
  auto k = p.keep(3, longer);
  CHECK(k.tokens == 13);
  CHECK(k.new_entry);
  REQUIRE(p.store().size() == 1);
  CHECK(p.store().entries()[0].tokens.size() == 13);
  CHECK(p.store_pages() == 4);  // the old partial page went with the shorter entry
  // Keeping a prefix of a kept sequence adds nothing.
  REQUIRE(p.promise(4, 6));
  CHECK(p.start(4, iota(6)).tokens == 5);
  p.hold(4, 1);
  CHECK_FALSE(p.keep(4, iota(6)).new_entry);
  CHECK(p.store().size() == 1);
  CHECK(p.census().balanced());
}

TEST_CASE("holds reclaim kept prompts least recently used first, before failing") {
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 4});
  std::vector<tf::kv::reclaim_request> seen;
  p.on_reclaim([&](auto const& r) { seen.push_back(r); });
  // Keep two prompts of 2 pages each: the pool's pages are all in the store.
  for (std::uint64_t id = 1; id <= 2; ++id) {
    REQUIRE(p.promise(id, 8));
    p.hold(id, 8);
    p.keep(id, iota(8, static_cast<std::int32_t>(id * 100)));
  }
  CHECK(p.free_pages() == 0);
  CHECK(p.store_pages() == 4);
  // Touch the first entry (reuse it), so the second is the least recently used.
  REQUIRE(p.promise(3, 5));
  CHECK(p.start(3, iota(6, 100)).tokens == 5);
  p.release(3);
  REQUIRE(p.promise(4, 16));  // kept pages count as room
  p.hold(4, 8);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == tf::kv::reclaim_request{2, 2, 1});
  CHECK(p.store().size() == 1);
  CHECK(p.store().entries()[0].tokens[0] == 100);  // the recently used one stayed
  p.hold(4, 8);
  CHECK(seen.size() == 2);
  CHECK(p.store().empty());
  CHECK(p.free_pages() == 0);
  CHECK(p.held_pages() == 4);
  p.release(4);
  auto r = p.reclaim(3);  // nothing left to reclaim
  CHECK(r == tf::kv::reclaim_request{3, 0, 0});
  CHECK(p.census().balanced());
}

TEST_CASE("a page size of 0 is a contiguous cache: one region per stream, handed over whole") {
  tf::kv::paged_pool p({.page_tokens = 0, .total_pages = 3, .region_tokens = 100});
  CHECK(p.contiguous());
  CHECK(p.pages_for(100) == 1);
  CHECK_FALSE(p.can_ever_fit(101));
  CHECK_FALSE(p.promise(1, 101));
  REQUIRE(p.promise(1, 100));
  p.hold(1, 30);
  REQUIRE(p.page_table(1).size() == 1);
  auto region = p.page_table(1)[0];
  auto prompt = iota(20);
  CHECK(p.keep(1, prompt).tokens == 20);  // a region keeps its prompt exactly
  CHECK(p.store_pages() == 1);
  auto next = iota(15);
  next.push_back(-1);
  REQUIRE(p.promise(2, 50));
  auto r = p.start(2, next);
  CHECK(r.took_over);
  CHECK(r.tokens == 15);
  REQUIRE(p.page_table(2).size() == 1);
  CHECK(p.page_table(2)[0] == region);
  CHECK(p.store().empty());
  CHECK(p.store_pages() == 0);
  p.hold(2, 35);
  CHECK_THROWS_AS(p.hold(2, 1), tf::error);
  p.release(2);
  CHECK(p.census().line() == "promised 0, free 3 + store 0 == total 3");
}

TEST_CASE("count_in: promises go through the room, and only from the start") {
  struct fake_room : tf::kv::room {
    bool answer = true;
    std::int64_t counted = 0;
    bool fits(tf::kv::need) const override { return answer; }
    void count(tf::kv::need n, int sign) override { counted += sign * n.pages; }
  } room;
  tf::kv::paged_pool p({.page_tokens = 4, .total_pages = 2});
  p.count_in(&room);
  REQUIRE(p.promise(1, 8));
  CHECK(room.counted == 2);
  room.answer = false;
  CHECK_FALSE(p.promise(2, 1));  // the room decides, not the pool
  CHECK_FALSE(p.fits(0));
  p.release(1);
  CHECK(room.counted == 0);
  tf::kv::paged_pool q({.page_tokens = 4, .total_pages = 2});
  REQUIRE(q.promise(1, 1));
  CHECK_THROWS_AS(q.count_in(&room), tf::error);
}
