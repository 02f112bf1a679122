// Tests include/tf/kv/ledger.hpp, and the pools counted in it: a pool counted in the ledger
// answers exactly as the same pool counted alone (the random walk).
#include <tf/kv/fwd.hpp>
#include <tf/kv/ledger.hpp>
#include <tf/serve/detail/ledger_binding.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

using tf::kv::need;
using tf::kv::unit;

TEST_CASE("want(n) is max(available, n) and fits compares it with what is available") {
  tf::kv::ledger l;
  l.add_room(unit::page, 10, 64);
  CHECK(l.room_bytes(unit::page) == 640);
  CHECK(l.want(unit::page, 100) == 640);
  CHECK(l.want(unit::page, 700) == 700);
  CHECK(l.fits({10, 0}));
  CHECK_FALSE(l.fits({11, 0}));
  REQUIRE(l.promise({4, 0}));
  CHECK(l.available_bytes(unit::page) == 6 * 64);
  CHECK(l.want(unit::page, l.bytes_of(unit::page, 7)) == 7 * 64);
  CHECK_FALSE(l.fits({7, 0}));
  CHECK_FALSE(l.promise({7, 0}));
  CHECK(l.promised_bytes() == 4 * 64);  // a refused promise counts nothing
  l.release({4, 0});
  CHECK(l.promised_bytes() == 0);
  CHECK_THROWS_AS(l.release({1, 0}), tf::error);
  CHECK_THROWS_AS(l.add_room(unit::page, 1, 32), tf::error);  // unit size must not change
  CHECK_THROWS_AS(l.promise({-1, 0}), tf::error);
}

TEST_CASE("pages and slots are separate rooms in the ledger") {
  tf::kv::ledger l;
  l.add_room(unit::page, 100, 8);
  CHECK_FALSE(l.fits({1, 1}));  // no slot room was counted
  l.add_room(unit::slot, 2, 1000);
  REQUIRE(l.promise({1, 1}));
  REQUIRE(l.promise({1, 1}));
  CHECK_FALSE(l.fits({1, 1}));  // slot bytes are spent although page bytes are plenty
  CHECK(l.fits({98, 0}));
  CHECK(l.room_bytes() == 800 + 2000);
}

TEST_CASE("the pools model ledger_countable; other types do not") {
  STATIC_REQUIRE(tf::kv::ledger_countable<tf::kv::paged_pool>);
  STATIC_REQUIRE(tf::kv::ledger_countable<tf::kv::hybrid_pool>);
  STATIC_REQUIRE_FALSE(tf::kv::ledger_countable<int>);
  STATIC_REQUIRE_FALSE(tf::kv::ledger_countable<tf::kv::slots>);
}

namespace {

struct walk_shape {
  std::int64_t page_tokens;
  std::int64_t unit_tokens;  // the page size, or a region's size when contiguous
  tf::kv::pool_config pool;
};

tf::kv::paged_pool make_pool(walk_shape const& s, tf::kv::paged_pool*) {
  return tf::kv::paged_pool(s.pool);
}
tf::kv::hybrid_pool make_pool(walk_shape const& s, tf::kv::hybrid_pool*) {
  return tf::kv::hybrid_pool({s.pool, 9, 4096});
}

std::string describe(tf::kv::census const& c) {
  return c.line() + " held " + std::to_string(c.held);
}

// One pool alone, one counted in a ledger: every operation, answer and reclaim must match.
template <class Pool>
void random_walk(walk_shape const& shape, std::uint32_t seed) {
  CAPTURE(seed, shape.page_tokens);
  std::mt19937 rng(seed);
  auto below = [&](std::int64_t n) {
    return std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng);
  };

  Pool alone = make_pool(shape, static_cast<Pool*>(nullptr));
  Pool counted = make_pool(shape, static_cast<Pool*>(nullptr));
  tf::kv::ledger ledger;
  tf::serve::detail::ledger_room room(ledger);
  tf::serve::detail::count_pool<Pool>(ledger, room, counted);
  std::vector<tf::kv::reclaim_request> reclaims_alone, reclaims_counted;
  alone.on_reclaim([&](auto const& r) { reclaims_alone.push_back(r); });
  counted.on_reclaim([&](auto const& r) { reclaims_counted.push_back(r); });

  // Prompts share prefixes: each is a cut of one of three base sequences plus a private tail.
  std::vector<std::vector<std::int32_t>> bases(3);
  for (std::size_t b = 0; b < bases.size(); ++b)
    for (std::int64_t i = 0; i < 3 * shape.unit_tokens; ++i)
      bases[b].push_back(static_cast<std::int32_t>(b * 1000 + static_cast<std::size_t>(i % 997)));
  std::map<std::uint64_t, std::vector<std::int32_t>> prompts;
  std::vector<std::uint64_t> live;
  std::uint64_t next_id = 1;
  std::int64_t reused_total = 0;

  auto both = [&](auto&& op) {
    auto run = [&](Pool& p) -> std::string {
      try {
        return op(p);
      } catch (tf::error const& e) {
        return std::string("error: ") + e.what();
      }
    };
    auto a = run(alone);
    auto b = run(counted);
    REQUIRE(a == b);
    return a;
  };

  int fits_calls = 0;
  for (int step = 0; step < 4000; ++step) {
    auto op = below(100);
    CAPTURE(step, op);
    if (op < 22) {  // promise a new stream, then start it (reusing a kept prefix if any)
      auto id = next_id++;
      auto& base = bases[static_cast<std::size_t>(below(3))];
      // Paged streams span a few pages; a contiguous stream must fit one region.
      auto spread = shape.page_tokens > 0 ? 2 * shape.unit_tokens : shape.unit_tokens / 2;
      auto cut = 1 + below(spread);
      std::vector<std::int32_t> prompt(base.begin(), base.begin() + cut);
      for (auto t = below(2) * below(8); t > 0; --t)
        prompt.push_back(static_cast<std::int32_t>(50000 + below(9)));
      auto max_tokens = below(below(6) == 0 ? 40 * shape.unit_tokens : spread);
      auto tokens = static_cast<std::int64_t>(prompt.size()) + max_tokens;
      auto out = both([&](Pool& p) {
        if (!p.promise(id, tokens)) return std::string("refused");
        auto r = p.start(id, prompt);
        return "admitted, reused " + std::to_string(r.tokens) + " slot " + std::to_string(r.slot);
      });
      if (out.starts_with("admitted")) {
        live.push_back(id);
        prompts[id] = prompt;
        reused_total += std::stoll(out.substr(out.find("reused ") + 7));
      }
    } else if (op < 50 && !live.empty()) {  // hold tokens (sometimes past the promise)
      auto id = live[static_cast<std::size_t>(below(static_cast<std::int64_t>(live.size())))];
      auto n = below(6) == 0 ? below(shape.unit_tokens * 50) : below(shape.unit_tokens);
      both([&](Pool& p) {
        p.hold(id, n);
        return "held " + std::to_string(p.stream_tokens(id)) + " pages " +
               std::to_string(p.page_table(id).size());
      });
    } else if (op < 62 && !live.empty()) {  // release
      auto i = static_cast<std::size_t>(below(static_cast<std::int64_t>(live.size())));
      both([&](Pool& p) {
        p.release(live[i]);
        return std::string("released");
      });
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op < 76 && !live.empty()) {  // keep in the store
      auto i = static_cast<std::size_t>(below(static_cast<std::int64_t>(live.size())));
      auto id = live[i];
      both([&](Pool& p) {
        auto k = p.keep(id, prompts[id]);
        return "kept " + std::to_string(k.tokens) + (k.new_entry ? " new" : " old");
      });
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op < 84) {  // reclaim from the store
      auto n = below(5);
      both([&](Pool& p) {
        auto r = p.reclaim(n);
        return "reclaimed " + std::to_string(r.freed) + " of " + std::to_string(r.wanted);
      });
    } else if (op < 96) {  // fits(0..29)
      ++fits_calls;
      both([&](Pool& p) {
        std::string s;
        for (std::int64_t n = 0; n < 30; ++n)
          s += p.fits(p.need_for(n * shape.unit_tokens)) ? '1' : '0';
        return s;
      });
    } else {  // an operation on a stream that does not exist
      auto id = next_id + 1000;
      auto out = both([&](Pool& p) {
        p.hold(id, 1);
        return std::string("held a missing stream");
      });
      REQUIRE(out.starts_with("error"));
    }
    auto ca = alone.census(), cb = counted.census();
    REQUIRE(describe(ca) == describe(cb));
    REQUIRE(ca.consistent());
    // The property: promised never exceeds what the ledger holds, and the ledger counts it.
    REQUIRE(ledger.promised_bytes(unit::page) == cb.promised * counted.page_bytes());
    REQUIRE(ledger.promised_bytes(unit::page) <= ledger.room_bytes(unit::page));
    REQUIRE(ledger.promised_bytes(unit::slot) == cb.slots_promised * counted.slot_bytes());
    REQUIRE(ledger.promised_bytes(unit::slot) <= ledger.room_bytes(unit::slot));
    REQUIRE(reclaims_alone == reclaims_counted);
  }
  for (auto id : live)
    both([&](Pool& p) {
      p.release(id);
      return std::string("released");
    });
  auto ca = alone.census(), cb = counted.census();
  CHECK(ca == cb);
  CHECK(cb.balanced());
  CHECK(cb.free + cb.store == cb.total);
  CHECK(ledger.promised_bytes() == 0);
  // The walk must have exercised what it claims to compare.
  CHECK(fits_calls > 100);
  CHECK(reused_total > 0);
  CHECK_FALSE(reclaims_counted.empty());
  INFO("final census: " << cb.line());
}

}  // namespace

TEST_CASE("random walk: a paged pool counted in the ledger answers as it does alone") {
  auto seed = GENERATE(1u, 20260u, 777u);
  SECTION("page size 4096") {
    random_walk<tf::kv::paged_pool>({4096, 4096, {4096, 24, 0, 1 << 20}}, seed);
  }
  SECTION("page size 0 (contiguous regions)") {
    random_walk<tf::kv::paged_pool>({0, 8192, {0, 12, 8192, 1 << 22}}, seed);
  }
}

TEST_CASE("random walk: a hybrid pool counted in the ledger answers as it does alone") {
  auto seed = GENERATE(5u, 91u);
  SECTION("page size 4096") {
    random_walk<tf::kv::hybrid_pool>({4096, 4096, {4096, 24, 0, 1 << 20}}, seed);
  }
  SECTION("page size 0 (contiguous regions)") {
    random_walk<tf::kv::hybrid_pool>({0, 8192, {0, 12, 8192, 1 << 22}}, seed);
  }
}
