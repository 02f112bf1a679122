// Tests include/tf/serve/lane_admission.hpp: waits, refusals, the bounded queue, prefix reuse,
// rank replay, hybrid slots, and the stop census after every test.
#include <tf/serve.hpp>
#include <tf/serve/lane_admission.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using tf::serve::reject_kind;
using tf::serve::submit_status;
using gemma = tf::families::gemma::gemma3;            // kvPool<paged_pool>
using nemotron = tf::families::nemotron::nemotron_h;  // ledgerPool<hybrid_pool>

namespace {

/// A family that admits whole lanes (no per-request admission).
struct whole_lanes {
  static constexpr std::string_view name = "whole_lanes";
  static constexpr std::array<std::string_view, 1> arch_names{"whole_lanes"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = false;
  static constexpr bool has_forward = false;
  using hparams = int;
};

std::vector<std::int32_t> prompt_of(std::int32_t n, std::int32_t from = 0) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}

struct log_lines {
  std::vector<std::string> lines;
  std::function<void(std::string_view)> sink() {
    return [this](std::string_view s) { lines.emplace_back(s); };
  }
};

tf::serve::lane_config lanes(std::size_t running, std::size_t queue, log_lines& log, int rank = 0,
                             int ranks = 1) {
  return {
      .max_running = running, .max_queue = queue, .rank = rank, .ranks = ranks, .log = log.sink()};
}

/// Stops the lane host and requires its census to balance and be printed.
template <class Lane>
tf::kv::census require_stop_census(Lane& lane, log_lines& log) {
  auto c = lane.stop();
  INFO("stop census: " << c.line());
  REQUIRE(c.balanced());
  REQUIRE(c.free + c.store == c.total);
  REQUIRE_FALSE(log.lines.empty());
  CHECK(log.lines.back().ends_with(c.line()));
  CHECK(log.lines.back().find("error") == std::string::npos);
  return c;
}

}  // namespace

TEST_CASE("requests that do not fit wait, and are admitted in order as memory frees") {
  log_lines log;
  tf::serve::lane_admission<gemma> lane({.page_tokens = 16, .total_pages = 8}, lanes(4, 2, log));
  auto a = lane.submit({1, prompt_of(10), 30});  // 3 pages
  auto b = lane.submit({2, prompt_of(10), 70});  // 5 pages
  CHECK(a.status == submit_status::admitted);
  CHECK(b.status == submit_status::admitted);
  CHECK(lane.ledger().promised_bytes() == lane.ledger().room_bytes());
  auto c = lane.submit({3, prompt_of(4), 4});  // 1 page: waits, nothing is free
  auto d = lane.submit({4, prompt_of(4), 4});
  CHECK(c.status == submit_status::queued);
  CHECK(d.status == submit_status::queued);
  CHECK(lane.admit_waiting().empty());
  auto load = lane.load();
  CHECK(load.running == 2);
  CHECK(load.queued == 2);
  CHECK(load.requeued == 0);

  lane.on_tokens(1, 25);
  CHECK(lane.page_table(1).size() == 2);
  CHECK(lane.load().pages_held == 2);
  lane.finish(1, false);
  auto admitted = lane.admit_waiting();
  REQUIRE(admitted.size() == 2);
  CHECK(admitted[0].id == 3);
  CHECK(admitted[1].id == 4);
  CHECK(lane.load().queued == 0);
  CHECK(lane.load().running == 3);
  CHECK(lane.ledger().promised_bytes() == 7 * lane.pool().page_bytes());
  auto census = require_stop_census(lane, log);
  CHECK(census.line() == "promised 0, free 8 + store 0 == total 8");
}

TEST_CASE("a request larger than the whole pool is refused at once") {
  log_lines log;
  tf::serve::lane_admission<gemma> lane({.page_tokens = 16, .total_pages = 8}, lanes(4, 2, log));
  auto r = lane.submit({1, prompt_of(100), 29});  // 129 tokens: 9 pages of 8
  CHECK(r.status == submit_status::rejected);
  CHECK(r.kind == reject_kind::larger_than_pool);
  CHECK(r.reason.find("request 1") != std::string::npos);
  CHECK(r.reason.find("9 pages") != std::string::npos);
  CHECK(r.reason.find("holds 8") != std::string::npos);
  CHECK(r.reason.find("never") != std::string::npos);
  CHECK(lane.load().queued == 0);
  // Exactly the pool is not larger than it.
  CHECK(lane.submit({2, prompt_of(100), 28}).status == submit_status::admitted);
  // Refused even while others wait, never queued.
  CHECK(lane.submit({3, prompt_of(1), 0}).status == submit_status::queued);
  CHECK(lane.submit({4, prompt_of(200), 0}).kind == reject_kind::larger_than_pool);
  CHECK(lane.load().queued == 1);
  require_stop_census(lane, log);
}

TEST_CASE("the queue is bounded; a full queue rejects with a reason") {
  log_lines log;
  tf::serve::lane_admission<gemma> lane({.page_tokens = 16, .total_pages = 64}, lanes(1, 2, log));
  CHECK(lane.submit({1, prompt_of(8), 8}).status == submit_status::admitted);
  // Memory is plenty; the one lane is busy.
  CHECK(lane.submit({2, prompt_of(8), 8}).status == submit_status::queued);
  CHECK(lane.submit({3, prompt_of(8), 8}).status == submit_status::queued);
  auto full = lane.submit({4, prompt_of(8), 8});
  CHECK(full.status == submit_status::rejected);
  CHECK(full.kind == reject_kind::queue_full);
  CHECK(full.reason.find("queue is full") != std::string::npos);
  CHECK(full.reason.find("at most 2") != std::string::npos);
  CHECK_THROWS_AS(lane.submit({2, prompt_of(8), 8}), tf::error);  // id already queued
  CHECK_THROWS_AS(lane.submit({9, {}, 8}), tf::error);
  CHECK_THROWS_AS(lane.submit({9, prompt_of(1), -1}), tf::error);
  CHECK(lane.cancel(2));  // a queued request leaves the queue
  CHECK_FALSE(lane.cancel(2));
  CHECK(lane.load().queued == 1);
  CHECK(lane.submit({4, prompt_of(8), 8}).status == submit_status::queued);
  lane.finish(1, false);
  CHECK(lane.admit_waiting().size() == 1);
  CHECK(lane.running(3));
  CHECK(lane.requeue(3));
  CHECK(lane.load().requeued == 1);
  auto again = lane.admit_waiting();
  REQUIRE(again.size() == 1);
  CHECK(again[0].id == 3);  // a requeued request goes back to the head of the queue
  CHECK_THROWS_AS(lane.on_tokens(77, 1), tf::error);
  CHECK(lane.take_decisions().empty());  // one rank: nobody to replay, nothing is logged
  require_stop_census(lane, log);
}

TEST_CASE("a prompt sharing a kept prefix starts from its pages") {
  log_lines log;
  tf::serve::lane_admission<gemma> lane({.page_tokens = 16, .total_pages = 16}, lanes(2, 2, log));
  REQUIRE(lane.submit({1, prompt_of(40), 10}).status == submit_status::admitted);
  lane.on_tokens(1, 45);
  std::vector<std::int32_t> kept(lane.page_table(1).begin(), lane.page_table(1).end());
  auto k = lane.finish(1, true);
  CHECK(k.tokens == 40);  // the prompt to the token
  CHECK(lane.load().pages_store == 3);
  auto next = prompt_of(40);
  next[35] = -7;
  auto r = lane.submit({2, next, 10});
  REQUIRE(r.status == submit_status::admitted);
  CHECK(r.reused_tokens == 35);
  REQUIRE(lane.page_table(2).size() == 3);
  CHECK(std::ranges::equal(lane.page_table(2), kept));
  auto fresh = lane.submit({3, prompt_of(40, 1000), 10});
  CHECK(fresh.reused_tokens == 0);
  // Token 35 goes into the third page, which the kept prompt still has: copy it first.
  auto copy = lane.on_tokens(2, 5);
  REQUIRE(copy);
  CHECK(copy->from == kept[2]);
  CHECK(lane.page_table(2)[2] == copy->to);
  CHECK_FALSE(lane.on_tokens(2, 1));
  std::vector<std::int32_t> written(next.begin(), next.end());
  written.push_back(5);  // one generated token in the KV
  CHECK(lane.finish(2, written).tokens == 41);
  auto c = require_stop_census(lane, log);
  CHECK(c.store == 4);  // two kept sequences share two pages
  CHECK(c.line() == "promised 0, free 12 + store 4 == total 16");
}

TEST_CASE("property: promised never exceeds the ledger's room; free + store == total at rest") {
  auto seed = GENERATE(3u, 4242u);
  CAPTURE(seed);
  std::mt19937 rng(seed);
  auto below = [&](std::int64_t n) {
    return std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng);
  };
  log_lines log;
  tf::serve::lane_admission<gemma> lane({.page_tokens = 16, .total_pages = 40}, lanes(6, 5, log));
  std::vector<std::uint64_t> running;
  std::uint64_t next = 1;
  int waits = 0, refusals = 0, reuses = 0;
  for (int step = 0; step < 3000; ++step) {
    CAPTURE(step);
    auto op = below(10);
    if (op < 4) {
      auto r = lane.submit({next,
                            prompt_of(static_cast<std::int32_t>(1 + below(120)),
                                      static_cast<std::int32_t>(below(3) * 1000)),
                            below(step % 50 == 0 ? 2000 : 200)});
      if (r.status == submit_status::admitted) running.push_back(next);
      waits += r.status == submit_status::queued;
      refusals += r.kind == reject_kind::larger_than_pool;
      reuses += r.reused_tokens > 0;
      ++next;
    } else if (op < 7 && !running.empty()) {
      auto id = running[static_cast<std::size_t>(below(static_cast<std::int64_t>(running.size())))];
      auto room = lane.pool().stream_promise_tokens(id) - lane.pool().stream_tokens(id);
      if (room > 0) lane.on_tokens(id, 1 + below(room));
    } else if (!running.empty()) {
      auto i = static_cast<std::size_t>(below(static_cast<std::int64_t>(running.size())));
      if (below(5) == 0)
        lane.cancel(running[i]);
      else
        lane.finish(running[i], below(2) == 0);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (auto const& a : lane.admit_waiting()) {
      running.push_back(a.id);
      reuses += a.reused_tokens > 0;
    }
    auto c = lane.census();
    REQUIRE(c.consistent());
    REQUIRE(lane.ledger().promised_bytes() <= lane.ledger().room_bytes());
    REQUIRE(lane.ledger().promised_bytes() == c.promised * lane.pool().page_bytes());
    REQUIRE(c.promised <= c.total);
    if (running.empty() && lane.load().running == 0) REQUIRE(c.free + c.store == c.total);
  }
  CHECK(waits > 0);
  CHECK(refusals > 0);
  CHECK(reuses > 0);
  require_stop_census(lane, log);
}

TEST_CASE("two ranks: rank 1 replays rank 0's decisions and ends with the same census") {
  log_lines log0, log1;
  tf::kv::pool_config shape{.page_tokens = 16, .total_pages = 24};
  tf::serve::lane_admission<gemma> rank0(shape, lanes(4, 4, log0, 0, 2));
  tf::serve::lane_admission<gemma> rank1(shape, lanes(4, 4, log1, 1, 2));
  CHECK(rank0.pool().counted());
  CHECK_FALSE(rank1.pool().counted());  // only rank 0's pool is counted
  CHECK_THROWS_AS(rank1.submit({1, prompt_of(4), 4}), tf::error);
  CHECK_THROWS_AS(rank0.replay({}), tf::error);
  CHECK_THROWS_AS(tf::serve::lane_admission<gemma>(shape, lanes(4, 4, log1, 1, 1)), tf::error);
  std::mt19937 rng(11);
  auto below = [&](std::int64_t n) {
    return std::uniform_int_distribution<std::int64_t>(0, n - 1)(rng);
  };
  std::vector<std::uint64_t> running;
  std::uint64_t next = 1;
  std::size_t replayed = 0;
  for (int round = 0; round < 400; ++round) {
    CAPTURE(round);
    auto r = rank0.submit({next,
                           prompt_of(static_cast<std::int32_t>(1 + below(60)),
                                     static_cast<std::int32_t>(below(2) * 500)),
                           below(120)});
    if (r.status == submit_status::admitted) running.push_back(next);
    ++next;
    for (auto id : running) {
      auto room = rank0.pool().stream_promise_tokens(id) - rank0.pool().stream_tokens(id);
      if (room > 0) rank0.on_tokens(id, 1 + below(room));
    }
    if (!running.empty() && below(2) == 0) {
      auto i = static_cast<std::size_t>(below(static_cast<std::int64_t>(running.size())));
      rank0.finish(running[i], below(2) == 0);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (auto const& a : rank0.admit_waiting()) running.push_back(a.id);
    auto ds = rank0.take_decisions();
    replayed += ds.size();
    rank1.replay(ds);
    auto c0 = rank0.census(), c1 = rank1.census();
    c0.ledger_promised_bytes = 0;  // rank 1 has no ledger to compare
    REQUIRE(c0 == c1);
    REQUIRE(rank1.load().running == rank0.load().running);
  }
  CHECK(replayed > 400);
  auto c0 = require_stop_census(rank0, log0);
  rank1.replay(rank0.take_decisions());  // rank 0's stop released its streams
  auto c1 = require_stop_census(rank1, log1);
  CHECK(c0.line() == c1.line());
  CHECK(c0.store > 0);  // the walk kept prompts, so the census compares more than zeros
  // A rank that cannot replay a decision diverged: that throws.
  tf::serve::lane_admission<gemma> small({.page_tokens = 16, .total_pages = 2},
                                         lanes(4, 4, log1, 1, 2));
  tf::serve::decision big{tf::serve::decision_kind::admit, 1, prompt_of(40), 20, false};
  CHECK_THROWS_AS(small.replay({&big, 1}), tf::error);
}

TEST_CASE("hybrid: slots run out before pages, and the request waits; census has the slots line") {
  log_lines log;
  tf::serve::lane_admission<nemotron> lane({{.page_tokens = 16, .total_pages = 51}, 3, 1 << 20},
                                           lanes(8, 4, log));
  CHECK(lane.ledger().room_bytes(tf::kv::unit::slot) == 3 << 20);
  for (std::uint64_t id = 1; id <= 3; ++id)
    CHECK(lane.submit({id, prompt_of(20), 12}).status == submit_status::admitted);
  CHECK(lane.load().pages_free == 51);  // nothing written yet, 6 of 51 pages promised
  auto w = lane.submit({4, prompt_of(20), 12});
  CHECK(w.status == submit_status::queued);  // pages are plenty; slots are not
  CHECK(lane.load().slots_held == 3);
  CHECK(lane.load().slots_free == 0);
  CHECK(lane.census().line() ==
        "promised 6, free 51 + store 0 == total 51; slots free 0 + held 3 == 3");
  lane.on_tokens(1, 32);
  // Keeps the prompt's pages and its state slot: the slot is reclaimable room.
  CHECK(lane.finish(1, true).tokens == 20);
  auto a = lane.admit_waiting();
  REQUIRE(a.size() == 1);
  CHECK(a[0].id == 4);
  CHECK(lane.load().pages_store == 0);  // stream 4 needed the kept slot: its entry was reclaimed
  lane.on_tokens(2, 32);
  lane.finish(2, true);
  auto c = require_stop_census(lane, log);
  CHECK(c.line() == "promised 0, free 49 + store 2 == total 51; slots free 2 + held 1 == 3");
}

TEST_CASE("a family without per-request admission promises a whole lane per request") {
  log_lines log;
  tf::serve::lane_config cfg = lanes(4, 4, log);
  cfg.lane_tokens = 64;  // 4 pages per lane
  tf::serve::lane_admission<whole_lanes> lane({.page_tokens = 16, .total_pages = 8}, cfg);
  CHECK(lane.submit({1, prompt_of(2), 2}).status == submit_status::admitted);
  CHECK(lane.pool().promised_pages() == 4);
  CHECK(lane.submit({2, prompt_of(2), 2}).status == submit_status::admitted);
  CHECK(lane.submit({3, prompt_of(2), 2}).status == submit_status::queued);
  auto big = lane.submit({4, prompt_of(60), 5});
  CHECK(big.kind == reject_kind::larger_than_pool);
  CHECK(big.reason.find("lane of 64 tokens") != std::string::npos);
  tf::serve::lane_config bad = lanes(4, 4, log);
  CHECK_THROWS_AS(
      tf::serve::lane_admission<whole_lanes>({.page_tokens = 16, .total_pages = 8}, bad),
      tf::error);
  require_stop_census(lane, log);
}
