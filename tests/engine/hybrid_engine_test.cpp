// tf::engine with recurrent state (tests/engine/tiny_hybrid.hpp): the state starts from zero at
// position 0 and continues across calls, rows in one batch keep to their own slots, and a copied
// state resumes a prefix exactly.
#include <tests/engine/tiny_hybrid.hpp>
#include <tf/serve.hpp>

#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

using tf::test::tiny_hybrid_engine;
using tf::test::tiny_hybrid_model;

namespace {

tf::backend::cpu binder;

tiny_hybrid_engine::weights weights() {
  return tiny_hybrid_model<tf::backend::cpu>::random(binder, 7);
}

std::vector<std::int32_t> prompt(int n, int salt) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 7 + salt * 13 + 1) % 64);
  return p;
}

// The last logits of `tokens` fed as chunks of `chunk` into `slot` with `pages`, from `start`.
std::vector<float> run(tiny_hybrid_engine& e, std::span<std::int32_t const> tokens,
                       std::vector<std::int32_t> const& pages, std::int32_t slot, int chunk,
                       std::int32_t start = 0) {
  std::vector<float> out(static_cast<std::size_t>(e.vocab_size()));
  for (std::size_t i = 0; i < tokens.size(); i += static_cast<std::size_t>(chunk)) {
    auto const n = std::min<std::size_t>(static_cast<std::size_t>(chunk), tokens.size() - i);
    tf::batch_row row{tokens.subspan(i, n), start + static_cast<std::int32_t>(i), pages, false,
                      slot};
    e.forward({&row, 1}, out.data());
  }
  return out;
}

}  // namespace

TEST_CASE("the engine owns a state store for a family with recurrent layers") {
  STATIC_REQUIRE(tiny_hybrid_engine::has_state);
  STATIC_REQUIRE(!tf::engine<tf::families::gemma::gemma3, tf::backend::cpu>::has_state);
  tiny_hybrid_engine e(weights(), {8, 4, tf::kv_dtype::f32, 3}, {1});
  CHECK(e.num_state_slots() == 3);
  CHECK(e.state_bytes() == 32 * 4);
  CHECK_THROWS_WITH(tiny_hybrid_engine(weights(), {8, 4, tf::kv_dtype::f32, 0}, {1}),
                    Catch::Contains("give the engine state slots"));
  std::vector<float> out(64);
  std::vector<std::int32_t> toks{1, 2}, pages{0};
  tf::batch_row no_slot{toks, 0, pages};
  CHECK_THROWS_WITH(e.forward({&no_slot, 1}, out.data()), Catch::Contains("no state slot"));
  tf::batch_row bad_slot{toks, 0, pages, false, 3};
  CHECK_THROWS_WITH(e.forward({&bad_slot, 1}, out.data()), Catch::Contains("state slot 3"));
}

TEST_CASE("the state restarts at position 0, continues across chunks and depends on the prefix") {
  tiny_hybrid_engine e(weights(), {8, 4, tf::kv_dtype::f32, 2}, {2});
  std::vector<std::int32_t> const pages{3, 1, 4, 0, 2, 5, 7, 6};
  auto const p = prompt(21, 1);
  auto const whole = run(e, p, pages, 0, 64);
  CHECK(run(e, p, pages, 1, 64) == whole);  // another slot, the same state
  CHECK(run(e, p, pages, 0, 5) == whole);   // in chunks: the state carries over
  CHECK(run(e, p, pages, 0, 1) == whole);   // token by token
  auto q = p;
  q[2] = (q[2] + 1) % 64;  // an early token changes the state, and so the last logits
  CHECK(run(e, q, pages, 0, 64) != whole);
}

TEST_CASE("rows in one batch keep to their slots; a copied state resumes a prefix exactly") {
  tiny_hybrid_engine e(weights(), {16, 4, tf::kv_dtype::f32, 4}, {2});
  std::vector<std::int32_t> const a_pages{0, 1, 2, 3, 4, 5, 6, 7}, b_pages{8, 9, 10, 11, 12, 13};
  auto const a = prompt(17, 2), b = prompt(9, 3);
  auto const a_solo = run(e, a, a_pages, 0, 64);
  auto const b_solo = run(e, b, b_pages, 1, 64);
  std::vector<float> both(2 * 64);
  std::vector<tf::batch_row> rows{{a, 0, a_pages, false, 2}, {b, 0, b_pages, false, 3}};
  e.forward(rows, both.data());
  CHECK(std::vector<float>(both.begin(), both.begin() + 64) == a_solo);
  CHECK(std::vector<float>(both.begin() + 64, both.end()) == b_solo);
  // Resume: a's first 12 tokens in slot 0, the state copied to slot 1, the rest from there.
  std::span<std::int32_t const> const as(a);
  run(e, as.first(12), a_pages, 0, 64);
  e.copy_state(0, 1);
  CHECK(run(e, as.subspan(12), a_pages, 1, 64, 12) == a_solo);
  // Without the copy, slot 1 holds b's state: the continuation differs.
  run(e, b, b_pages, 1, 64);
  CHECK(run(e, as.subspan(12), a_pages, 1, 64, 12) != a_solo);
}

namespace {

using host = tf::serve::lane_host<tiny_hybrid_engine, tf::test::tiny_hybrid>;
using namespace std::chrono_literals;

std::vector<std::int32_t> serve_one(host& h, std::vector<std::int32_t> const& prompt, int n) {
  tf::serve::generation_request g;
  g.prompt = prompt;
  g.max_tokens = n;
  auto s = h.submit(std::move(g));
  REQUIRE(s.status != tf::serve::submit_status::rejected);
  std::vector<std::int32_t> out;
  for (;;) {
    auto c = s.stream->next(100ms);
    for (auto& t : c.tokens) out.push_back(t.token);
    if (c.done) return out;
  }
}

// The stop census of `h` balances and prints its slots line.
void check_stop_census(host& h, std::int64_t slots) {
  auto const c = h.shutdown(0ms);
  INFO(c.line());
  CHECK(c.balanced());
  CHECK(c.line().find(fmt::format("; slots free {} + held {} == {}", c.slots_free, c.slots_held,
                                  slots)) != std::string::npos);
  CHECK(c.slots_free + c.slots_held == slots);
}

}  // namespace

TEST_CASE("served through the lane host: 8 concurrent == solo, resumed == fresh, slots census") {
  auto const w = weights();
  std::vector<std::vector<std::int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(prompt(5 + 9 * i, i));
  // Solo: each request alone on a fresh engine and host.
  std::vector<std::vector<std::int32_t>> solo;
  for (auto const& p : prompts) {
    tiny_hybrid_engine e(w, {32, 16, tf::kv_dtype::f16, 4}, {1});
    host h(e, {1, 256, 8, 64});
    solo.push_back(serve_one(h, p, 12));
    check_stop_census(h, 3);  // the lane's snapshot slot is the host's, not the pool's
  }
  // Eight at once over four lanes, two threads.
  {
    tiny_hybrid_engine e(w, {64, 16, tf::kv_dtype::f16, 10}, {2});
    host h(e, {4, 256, 16, 64});
    std::vector<std::shared_ptr<tf::serve::request_stream>> streams;
    for (auto const& p : prompts) {
      tf::serve::generation_request g;
      g.prompt = p;
      g.max_tokens = 12;
      auto s = h.submit(std::move(g));
      REQUIRE(s.status != tf::serve::submit_status::rejected);
      streams.push_back(s.stream);
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      std::vector<std::int32_t> got;
      for (bool done = false; !done;) {
        auto c = streams[i]->next(100ms);
        for (auto& t : c.tokens) got.push_back(t.token);
        done = c.done;
      }
      INFO("request " << i);
      CHECK(got == solo[i]);
    }
    CHECK(h.load().max_running_seen <= 4);
    check_stop_census(h, 6);
  }
  // Resumed: a prompt that extends a finished one starts from its kept pages and state.
  tiny_hybrid_engine e(w, {32, 16, tf::kv_dtype::f16, 4}, {1});
  host h(e, {1, 256, 8, 64});
  auto longer = prompts[7];
  for (int i = 0; i < 7; ++i) longer.push_back((i * 5 + 3) % 64);
  serve_one(h, prompts[7], 12);
  auto const resumed = serve_one(h, longer, 12);
  CHECK(h.stats().prompt_tokens_reused.load() > 0);
  check_stop_census(h, 3);
  tiny_hybrid_engine fresh_engine(w, {32, 16, tf::kv_dtype::f16, 4}, {1});
  host fresh(fresh_engine, {1, 256, 8, 64});
  CHECK(serve_one(fresh, longer, 12) == resumed);
  check_stop_census(fresh, 3);
}
