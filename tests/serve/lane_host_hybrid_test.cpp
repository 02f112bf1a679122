// Tests include/tf/serve/lane_host.hpp over a ledgerPool family with recurrent-state slots
// (kv::hybrid_pool): batched == solo, resumed == fresh with the kept state, slots as a limit,
// refusals, and the stop census with its slots line.
#include <tf/serve/lane_host.hpp>
#include <tf/serve/sha256.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "hybrid_toy.hpp"
#include "lane_requests.hpp"

using namespace tf::serve;
using namespace std::chrono_literals;

namespace {

using host = lane_host<hybrid_toy_model, hybrid_toy_family>;

/// Stops the host; its census must balance and print the slots line for `pages` and `slots`.
census require_stop_census(host& h, std::size_t pages, std::size_t slots) {
  auto c = h.shutdown(0ms);
  INFO(c.line());
  CHECK(c.balanced());
  CHECK(c.has_slots);
  CHECK(c.line() ==
        fmt::format("promised 0, free {} + store {} == total {}; slots free {} + held {} == {}",
                    c.free, c.store, pages, c.slots_free, c.slots_held, slots));
  CHECK(c.slots_held == c.slots_store);  // at rest only kept prompt states hold slots
  return c;
}

std::vector<reply> solo_replies() {
  std::vector<reply> out;
  for (auto const& p : prompts()) {
    hybrid_toy_model model(64, 16, 2);
    host h(model, {1, 512, 8, 64});
    out.push_back(drain(h.submit(make_request(p, 48)).stream));
    require_stop_census(h, 64, 1);
  }
  return out;
}

std::vector<reply> run_concurrent(std::size_t parallel, std::size_t pages, std::size_t slots,
                                  std::size_t& max_running) {
  hybrid_toy_model model(pages, 16, slots + parallel, 200us);
  host h(model, {parallel, 512, 64, 64});
  std::vector<std::shared_ptr<request_stream>> streams;
  for (auto const& p : prompts()) {
    auto r = h.submit(make_request(p, 48));
    REQUIRE(r.status != submit_status::rejected);
    streams.push_back(r.stream);
  }
  std::vector<reply> out;
  for (auto& s : streams) out.push_back(drain(s));
  auto load = h.load();
  max_running = load.max_running_seen;
  CHECK(load.lanes == parallel);
  CHECK(load.state_slots_total == slots);
  require_stop_census(h, pages, slots);
  return out;
}

}  // namespace

TEST_CASE("hybrid: concurrent replies equal solo replies at --parallel 4 and 8") {
  auto const solo = solo_replies();
  for (std::size_t parallel : {4u, 8u}) {
    std::size_t max_running = 0;
    auto got = run_concurrent(parallel, 64, parallel + 2, max_running);
    CHECK(max_running <= parallel);
    REQUIRE(got.size() == solo.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("parallel " << parallel << " request " << i);
      CHECK(token_sha(got[i].tokens) == token_sha(solo[i].tokens));
      CHECK(got[i].reason == solo[i].reason);
      CHECK(!got[i].tokens.empty());
    }
  }
}

TEST_CASE("hybrid: fewer state slots than --parallel limit the running streams") {
  auto const solo = solo_replies();
  std::size_t max_running = 0;
  auto got = run_concurrent(4, 64, 2, max_running);
  CHECK(max_running >= 1);
  CHECK(max_running <= 2);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].tokens == solo[i].tokens);
  // A pool short of pages too: requests wait for pages or slots, replies do not change.
  got = run_concurrent(8, 24, 3, max_running);
  CHECK(max_running <= 3);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].tokens == solo[i].tokens);
}

namespace {

std::vector<std::int32_t> fresh(std::string const& text, int max_tokens) {
  hybrid_toy_model model(64, 16, 3);
  host h(model, {1, 512, 8, 64});
  auto r = drain(h.submit(make_request(text, max_tokens)).stream).tokens;
  h.shutdown(0ms);
  return r;
}

}  // namespace

TEST_CASE("hybrid: a resumed prompt (kept pages and state) equals a fresh one") {
  // The snapshot is the state before the prompt's last token, so the same prompt again reuses
  // all but that token; a longer one reuses as much. 101 tokens cross a 16-token page, 96 end on
  // one (the kept prefix of 95 ends inside a page either way: its last page is copied).
  for (std::size_t base_len : {100u, 95u}) {
    INFO("base of " << base_len + 1 << " tokens");
    std::string const base(base_len, 'r');
    auto const fresh_a = fresh(base, 30), fresh_b = fresh(base + "tail", 30);
    hybrid_toy_model model(64, 16, 4);  // 3 pool slots: the stream and the kept state differ
    host h(model, {1, 512, 8, 64});
    auto first = drain(h.submit(make_request(base, 30)).stream).tokens;
    CHECK(h.stats().prompt_tokens_reused.load() == 0);
    auto again = drain(h.submit(make_request(base, 30)).stream).tokens;
    auto longer = drain(h.submit(make_request(base + "tail", 30)).stream).tokens;
    CHECK(first == fresh_a);
    CHECK(again == fresh_a);
    CHECK(longer == fresh_b);
    // All but the prompt's last token came from the store for "again" and for "longer".
    auto const reused = h.stats().prompt_tokens_reused.load();
    CHECK(reused == 2u * base_len);
    CHECK(h.stats().prompt_tokens.load() + reused == 2 * (base_len + 1) + base_len + 5);
    CHECK(model.copies() > 0);
    auto c = require_stop_census(h, 64, 3);
    CHECK(c.store > 0);
    CHECK(c.slots_store >= 1);
  }
}

TEST_CASE("hybrid: one pool slot, the stream takes the kept state's slot over") {
  // With no slot free for the prompt's own entry only the whole sequence is kept (its state is
  // the stream's slot); a next turn that continues it reuses all of it.
  std::string const base(100, 'q');
  hybrid_toy_model model(64, 16, 2);  // 1 pool slot, 1 snapshot slot
  host h(model, {1, 512, 8, 64});
  auto first = drain(h.submit(make_request(base, 20)).stream);
  std::string said;
  for (auto t : first.tokens) said += static_cast<char>(t);
  auto const turn = base + said + "more";
  auto const fresh_turn = fresh(turn, 20);
  auto next = drain(h.submit(make_request(turn, 20)).stream).tokens;
  CHECK(next == fresh_turn);
  // The first reply's last token was sampled but never run, unless the reply ended on EOS.
  auto const in_kv = 101 + first.tokens.size() - (first.reason == finish_reason::length ? 1 : 0);
  CHECK(h.stats().prompt_tokens_reused.load() == in_kv);
  require_stop_census(h, 64, 1);
}

TEST_CASE("hybrid: without the state copies a resumed prompt differs (the test can fail)") {
  std::string const base(100, 'r');
  auto const fresh_b = fresh(base + "tail", 30);
  hybrid_toy_model model(64, 16, 4);
  model.drop_copies = true;
  host h(model, {1, 512, 8, 64});
  drain(h.submit(make_request(base, 30)).stream);
  auto longer = drain(h.submit(make_request(base + "tail", 30)).stream).tokens;
  CHECK(h.stats().prompt_tokens_reused.load() == 100);
  CHECK(longer != fresh_b);
  require_stop_census(h, 64, 3);
}

TEST_CASE("hybrid: refusals (whole pool, too few slots) and cancels balance the census") {
  hybrid_toy_model model(8, 16, 3, 1ms);
  host h(model, {2, 512, 4, 64});
  auto big = h.submit(make_request(std::string(200, 'x'), 4));  // 206 tokens: 13 pages > 8
  CHECK(big.status == submit_status::rejected);
  CHECK(big.reason == reject_reason::larger_than_pool);
  CHECK(big.message.find("can never be admitted") != std::string::npos);
  CHECK(h.stats().rejected_larger_than_pool.load() == 1);
  auto ok = drain(h.submit(make_request("fits", 8)).stream);
  CHECK(ok.reason != finish_reason::error);
  auto r = h.submit(make_request("cancel me", 100));
  REQUIRE(r.stream);
  r.stream->cancel();
  CHECK(drain(r.stream).reason == finish_reason::cancelled);
  require_stop_census(h, 8, 1);

  hybrid_toy_model few(8, 16, 4);
  CHECK_THROWS_AS(host(few, {4, 512, 4, 64}), tf::error);  // no slot left for the pool
}
