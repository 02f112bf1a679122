// A draft model as a draft source (include/tf/serve/model_draft.hpp) whose KV mirrors the target's
// pages: its proposals equal the proposals a fresh draft model makes from the whole history,
// whatever the pages held before (another stream's tokens, a shared prefix, a stream's own rejected
// drafts); the lane host holds a drafting stream's pages before it proposes, so the draft KV is
// promised with the target's; and drafted replies equal the replies without drafts.
#include <families/qwen/qwen3.hpp>
#include <tests/common/served_replies.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/open.hpp>
#include <tf/serve/lane_host.hpp>
#include <tf/serve/model_draft.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
using tf::serve::model_draft;
using namespace std::chrono_literals;

namespace {

std::string const target_path = std::string(TF_FIXTURES_DIR) + "/qwen/tiny/tiny-q8_0.gguf";
std::string const draft_path = std::string(TF_FIXTURES_DIR) + "/qwen/tiny/tiny-f32.gguf";
constexpr std::int32_t page_tokens = 8;

std::unique_ptr<tf::loaded_model> open_draft() {
  tf::open_options o;
  o.page_tokens = page_tokens;
  o.kv = tf::kv_dtype::f32;
  return tf::open(draft_path, o);
}

// What a draft model with a store of its own proposes for `h` from scratch.
std::vector<std::int32_t> fresh(std::vector<std::int32_t> const& h, std::size_t max) {
  model_draft d(open_draft(), 1, 256);
  std::vector<std::int32_t> out;
  d.propose(h, max, out);
  return out;
}

}  // namespace

TEST_CASE("a draft model mirroring the target's pages proposes what a fresh one does") {
  model_draft d(open_draft(), 1, page_tokens);
  CHECK_FALSE(d.mirrors());
  d.bind_target_pool({12, page_tokens});
  REQUIRE(d.mirrors());
  CHECK(d.writes_ahead());
  CHECK(d.kv_bytes_per_token() == d.model().store_bytes() / (12 * page_tokens));
  CHECK(d.kv_bytes_per_token() > 0);
  std::mt19937 rng(5);
  auto tokens = [&](std::size_t n) {
    std::vector<std::int32_t> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<std::int32_t>(3 + rng() % 900));
    return v;
  };
  std::vector<std::int32_t> out;
  auto check = [&](std::vector<std::int32_t> const& h, std::vector<std::int32_t> const& pages) {
    INFO("history of " << h.size() << " over pages " << pages.front() << "..");
    out.clear();
    d.propose_at(h, pages, 4, out);
    CHECK(out == fresh(h, 4));
  };
  // Stream A grows through its pages, its drafts (written past the pending token) rejected.
  auto a = tokens(13);
  std::vector<std::int32_t> const pages_a{3, 7, 1};
  check(a, pages_a);
  a.push_back(out[0]);  // the first draft accepted, then a token of the target's own
  a.push_back(17);
  check(a, pages_a);
  // Stream D holds A's second page, where A's tokens stand too, after a first page of its own:
  // what A's draft wrote there attended over A's first page, not D's.
  auto d_tokens = tokens(page_tokens);
  d_tokens.insert(d_tokens.end(), a.begin() + page_tokens, a.end());
  check(d_tokens, {10, 7, 1});
  check(a, pages_a);  // and A's pages 7 and 1 hold D's now
  // Stream B shares A's first page (a prefix cache hit) and then goes its own way in page 5.
  std::vector<std::int32_t> b(a.begin(), a.begin() + page_tokens);
  auto const tail = tokens(6);
  b.insert(b.end(), tail.begin(), tail.end());
  check(b, {3, 5, 9});
  // A's second page goes to stream C, whose tokens differ from the first position on: nothing
  // A's draft wrote there may be taken for C's.
  auto const c = tokens(20);
  check(c, {7, 2, 4});
  // A again: its page 7 now holds C's KV and must be run again.
  a.push_back(23);
  check(a, pages_a);
  // Nothing past the pages' reach is written: the drafts stop where they end.
  auto const full = tokens(23);  // positions 0..22 of 24
  out.clear();
  std::vector<std::int32_t> const three{0, 6, 8};
  d.propose_at(full, three, 4, out);
  CHECK(out.size() == 2);
  CHECK(out == fresh(full, 2));
  // Without the stream's pages it proposes nothing.
  out.clear();
  d.propose(a, 4, out);
  CHECK(out.empty());
  // A pool of other pages is refused.
  model_draft other(open_draft(), 1, page_tokens);
  CHECK_THROWS_WITH(other.bind_target_pool({12, 16}), Catch::Contains("open it with"));
}

namespace {

using engine = tf::engine<qwen::qwen3, tf::backend::cpu>;
using tf::serve::generation_request;

using served = tf::test::served_replies;

// Every request at once on `parallel` lanes of the tiny Qwen3 target in pages of 8 tokens, with
// its own F32 file as a mirroring draft model, or no drafts.
served serve(std::vector<generation_request> const& reqs, std::size_t parallel, bool drafting) {
  auto const file = tf::model::model_file::open(target_path);
  engine e(file, {48, page_tokens, tf::kv_dtype::f32, 0}, {1});
  tf::serve::draft_config drafts;
  std::shared_ptr<model_draft> source;
  if (drafting) {
    source = std::make_shared<model_draft>(open_draft(), 1, page_tokens);
    drafts.source = source;
    drafts.max_tokens = 4;
    drafts.fixed_rows = std::numeric_limits<double>::infinity();
  }
  tf::serve::metrics m;
  tf::serve::lane_host<engine, qwen::qwen3> host(e, {parallel, 128, 64, 64}, &m, drafts);
  if (drafting) CHECK(source->mirrors());
  return tf::test::serve_all(host, m, reqs);
}

}  // namespace

TEST_CASE("a mirroring draft model in the lane host: replies unchanged, drafts accepted") {
  for (bool const seeded : {false, true}) {
    INFO((seeded ? "seeded" : "greedy"));
    std::vector<generation_request> reqs;
    for (int i = 0; i < 4; ++i) {
      generation_request r;
      for (int j = 0; j < 5 + 6 * i; ++j) r.prompt.push_back(3 + (37 * j + 101 * i) % 900);
      r.max_tokens = 20;
      if (seeded) {
        r.sampling.temperature = 0.8f;
        r.sampling.seed = 11 + static_cast<std::uint64_t>(i);
      }
      reqs.push_back(std::move(r));
    }
    auto const plain = serve(reqs, 4, false);
    auto const drafted = serve(reqs, 4, true);
    CHECK(drafted.replies == plain.replies);
    CHECK(drafted.drafted > 0);
    // The F32 file drafting for its Q8_0 self: most greedy drafts are the target's own tokens.
    if (!seeded) CHECK(drafted.accepted * 2 > drafted.drafted);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      auto const solo = serve({reqs[i]}, 1, true);
      CHECK(solo.replies.front() == plain.replies[i]);
    }
  }
}
