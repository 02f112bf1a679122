// Tests include/tf/serve/draft_source.hpp and the lane host's verification of drafts: a drafted
// reply is the reply without drafts, token for token, greedy and seeded, solo and concurrent,
// whatever the drafts are (always right, always wrong, partly right, n-gram), and the pool
// balances after any mix of accepts, rejects, cancels and refusals.
#include <tf/serve/draft_source.hpp>
#include <tf/serve/lane_host.hpp>
#include <tf/serve/sha256.hpp>

#include <catch2/catch.hpp>

#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hybrid_toy.hpp"
#include "lane_requests.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using namespace std::chrono_literals;

namespace {

std::vector<std::int32_t> ids(std::string_view s) {
  return {s.begin(), s.end()};
}

std::vector<std::int32_t> propose(draft_source& d, std::vector<std::int32_t> const& h,
                                  std::size_t max) {
  std::vector<std::int32_t> out;
  d.propose(h, max, out);
  return out;
}

// The toy model's greedy continuation of a history: its hash chain, then argmax of each row.
// Drafting for the target exactly as it decodes: every draft is accepted under greedy sampling.
class toy_greedy_draft : public draft_source {
 public:
  // `wrong_at` >= 0: the draft at that index (if proposed) is replaced by a different token.
  explicit toy_greedy_draft(int wrong_at = -1) : wrong_at_(wrong_at) {}
  std::string_view name() const override { return "toy-greedy"; }
  void propose(std::span<std::int32_t const> h, std::size_t max,
               std::vector<std::int32_t>& out) override {
    std::uint64_t s = 0x9e3779b97f4a7c15ull;
    for (auto t : h) s = toy_mix(s ^ (static_cast<std::uint64_t>(t) + 1) * 0xff51afd7ed558ccdull);
    std::vector<float> row(toy_vocab::size);
    for (std::size_t i = 0; i < max; ++i) {
      toy_logits(s, row.data());
      auto t = static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
      if (static_cast<int>(i) == wrong_at_) t = t == 'a' ? 'b' : 'a';
      out.push_back(t);
      if (t == toy_vocab::eos) return;  // the reply ends there: nothing follows to draft
      s = toy_mix(s ^ (static_cast<std::uint64_t>(t) + 1) * 0xff51afd7ed558ccdull);
    }
  }

 private:
  int wrong_at_;
};

// Never right: a token the toy model never samples (its logit is -20 against printable ones).
class always_wrong_draft : public draft_source {
 public:
  std::string_view name() const override { return "wrong"; }
  void propose(std::span<std::int32_t const>, std::size_t max,
               std::vector<std::int32_t>& out) override {
    out.insert(out.end(), max, 1);
  }
};

// Drafts what the target replied without drafts (any model, greedy or seeded): the rest of the
// recorded sequence the history is a prefix of; `wrong_at` >= 0 spoils that draft index.
class replay_draft : public draft_source {
 public:
  explicit replay_draft(std::vector<std::vector<std::int32_t>> sequences, int wrong_at = -1)
      : seqs_(std::move(sequences)), wrong_at_(wrong_at) {}
  std::string_view name() const override { return "replay"; }
  void propose(std::span<std::int32_t const> h, std::size_t max,
               std::vector<std::int32_t>& out) override {
    for (auto const& s : seqs_) {
      if (s.size() <= h.size() || !std::equal(h.begin(), h.end(), s.begin())) continue;
      for (std::size_t i = 0; i < max && h.size() + i < s.size(); ++i)
        out.push_back(static_cast<int>(i) == wrong_at_ ? 1 : s[h.size() + i]);
      return;
    }
  }

 private:
  std::vector<std::vector<std::int32_t>> seqs_;
  int wrong_at_;
};

struct run_result {
  std::vector<reply> replies;
  std::uint64_t drafted = 0, accepted = 0;
  std::size_t usage_drafted = 0, usage_accepted = 0;
};

// Serves every request at once with `parallel` streams and the given drafts, on `model`. Unless
// `weigh`, every round drafts whatever the acceptance (these tests are of the verification).
template <class Family, class Model>
run_result serve_on(Model& model, std::vector<generation_request> const& reqs, std::size_t parallel,
                    std::shared_ptr<draft_source> source, bool weigh = false) {
  draft_config drafts;
  drafts.source = std::move(source);
  drafts.max_tokens = 6;
  if (!weigh) drafts.fixed_rows = std::numeric_limits<double>::infinity();
  drafts.measure_rows = false;  // the toy's round times say nothing of a model's; the rule does
  metrics m;
  lane_host<Model, Family> host(model, {parallel, 512, 64, 64}, &m, drafts);
  CHECK(host.drafting() == (drafts.source != nullptr));
  std::vector<std::shared_ptr<request_stream>> streams;
  for (auto const& r : reqs) {
    auto s = host.submit(r);
    REQUIRE(s.status != submit_status::rejected);
    streams.push_back(s.stream);
  }
  run_result out;
  for (auto& s : streams) {
    out.replies.push_back(drain(s));
    out.usage_drafted += s->drafted_tokens();
    out.usage_accepted += s->accepted_tokens();
  }
  auto const c = host.shutdown(0ms);
  CHECK(c.balanced());
  out.drafted = m.draft_tokens.load();
  out.accepted = m.draft_accepted.load();
  CHECK(out.drafted == out.usage_drafted);
  CHECK(out.accepted == out.usage_accepted);
  return out;
}

run_result serve_all(std::vector<generation_request> const& reqs, std::size_t parallel,
                     std::shared_ptr<draft_source> source) {
  toy_model model(96, 16);
  return serve_on<toy_family>(model, reqs, parallel, std::move(source));
}

// The hybrid toy with a slot per stream, a snapshot and a draft slot per lane, and spares.
run_result serve_hybrid(std::vector<generation_request> const& reqs, std::size_t parallel,
                        std::shared_ptr<draft_source> source) {
  hybrid_toy_model model(96, 16, 3 * parallel + 4);
  return serve_on<hybrid_toy_family>(model, reqs, parallel, std::move(source));
}

// Each request's prompt followed by its reply.
std::vector<std::vector<std::int32_t>> sequences(std::vector<generation_request> const& reqs,
                                                 run_result const& r) {
  std::vector<std::vector<std::int32_t>> out;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    out.push_back(reqs[i].prompt);
    out.back().insert(out.back().end(), r.replies[i].tokens.begin(), r.replies[i].tokens.end());
  }
  return out;
}

// Eight requests: the lane tests' prompts, half greedy, half seeded at temperature 0.8 with
// top-k / top-p and one of those with a repetition penalty; n-gram-friendly repeated text among
// them.
std::vector<generation_request> mixed_requests(bool seeded) {
  std::vector<generation_request> reqs;
  auto p = prompts();
  p[1] = "abcabcabcabcabcabcabc the cat sat. the cat sat. the cat";
  for (std::size_t i = 0; i < p.size(); ++i) {
    auto r = make_request(p[i], 40);
    if (seeded) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 100 + i;
      r.sampling.top_logprobs = 2;
    }
    if (seeded && i == 5) r.sampling.repetition_penalty = 1.3f;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void check_same(run_result const& got, run_result const& want) {
  REQUIRE(got.replies.size() == want.replies.size());
  for (std::size_t i = 0; i < got.replies.size(); ++i) {
    INFO("request " << i);
    CHECK(token_sha(got.replies[i].tokens) == token_sha(want.replies[i].tokens));
    CHECK(got.replies[i].reason == want.replies[i].reason);
  }
}

}  // namespace

TEST_CASE("n-gram drafts: the tokens after the latest earlier match of the longest suffix") {
  ngram_draft d({2, 4});
  CHECK(propose(d, ids("abcdxyzabc"), 3) == ids("dxy"));
  CHECK(propose(d, ids("abcdxyzabc"), 10) == ids("dxyzabc"));
  // The latest occurrence wins: "ab" was followed by "c" first and by "q" later.
  CHECK(propose(d, ids("abcXabqqab"), 2) == ids("qq"));
  // A 3-token match beats a later 2-token one.
  CHECK(propose(d, ids("xab1 zab2 xab"), 1) == ids("1"));
  // No match, a 1-token suffix (below min_match), nothing asked, empty history: no drafts.
  CHECK(propose(d, ids("abcdefg"), 4).empty());
  CHECK(propose(d, ids("xaya"), 4).empty());
  CHECK(propose(d, ids("abcab"), 0).empty());
  CHECK(propose(d, {}, 4).empty());
  ngram_draft one({1, 1});
  CHECK(propose(one, ids("xaya"), 4) == ids("ya"));
  CHECK_THROWS_AS(ngram_draft({0, 2}), tf::error);
  CHECK_THROWS_AS(ngram_draft({3, 2}), tf::error);
  CHECK(d.name() == "ngram");
}

TEST_CASE(
    "drafted replies equal the replies without drafts, greedy and seeded, solo and 8 at once") {
  for (bool seeded : {false, true}) {
    auto const reqs = mixed_requests(seeded);
    auto const plain = serve_all(reqs, 8, nullptr);
    CHECK(plain.drafted == 0);
    auto solo_plain = run_result{};
    for (auto const& r : reqs) solo_plain.replies.push_back(serve_all({r}, 1, nullptr).replies[0]);
    check_same(plain, solo_plain);
    std::vector<std::pair<std::string, std::shared_ptr<draft_source>>> const sources{
        {"ngram", std::make_shared<ngram_draft>(ngram_config{1, 4})},
        {"greedy", std::make_shared<toy_greedy_draft>()},
        {"wrong at 2", std::make_shared<toy_greedy_draft>(2)},
        {"always wrong", std::make_shared<always_wrong_draft>()}};
    for (auto const& [name, source] : sources) {
      INFO((seeded ? "seeded, " : "greedy, ") << "drafts: " << name);
      auto const many = serve_all(reqs, 8, source);
      check_same(many, plain);
      CHECK(many.drafted > 0);
      run_result solo;
      for (auto const& r : reqs) solo.replies.push_back(serve_all({r}, 1, source).replies[0]);
      check_same(solo, plain);
      if (name == "always wrong") CHECK(many.accepted == 0);
      if (name == "greedy" && !seeded) CHECK(many.accepted == many.drafted);
      if (name == "wrong at 2") CHECK(many.accepted < many.drafted);
      if (name != "always wrong" && !seeded) CHECK(many.accepted > 0);
    }
  }
}

TEST_CASE("a request with draft off gets no drafts; its reply is the same") {
  auto reqs = mixed_requests(true);
  for (auto& r : reqs) r.draft = false;
  auto const off = serve_all(reqs, 4, std::make_shared<toy_greedy_draft>());
  CHECK(off.drafted == 0);
  check_same(off, serve_all(mixed_requests(true), 4, nullptr));
}

TEST_CASE("the target's own replies as drafts: all accepted; spoiled at index 2: partly") {
  for (bool seeded : {false, true}) {
    INFO((seeded ? "seeded" : "greedy"));
    auto const reqs = mixed_requests(seeded);
    auto const plain = serve_all(reqs, 8, nullptr);
    auto const all = serve_all(reqs, 8, std::make_shared<replay_draft>(sequences(reqs, plain)));
    check_same(all, plain);
    CHECK(all.drafted > 0);
    CHECK(all.accepted == all.drafted);
    auto const part = serve_all(reqs, 8, std::make_shared<replay_draft>(sequences(reqs, plain), 2));
    check_same(part, plain);
    CHECK(part.accepted > 0);
    CHECK(part.accepted < part.drafted);
  }
}

TEST_CASE(
    "a pool with recurrent-state slots: drafted replies equal plain ones; rejected drafts "
    "take the state back") {
  for (bool seeded : {false, true}) {
    auto const reqs = mixed_requests(seeded);
    auto const plain = serve_hybrid(reqs, 4, nullptr);
    run_result solo;
    for (auto const& r : reqs) solo.replies.push_back(serve_hybrid({r}, 1, nullptr).replies[0]);
    check_same(plain, solo);
    auto const seqs = sequences(reqs, plain);
    std::vector<std::pair<std::string, std::shared_ptr<draft_source>>> const sources{
        {"ngram", std::make_shared<ngram_draft>(ngram_config{1, 4})},
        {"replay", std::make_shared<replay_draft>(seqs)},
        {"replay spoiled at 2", std::make_shared<replay_draft>(seqs, 2)},
        {"always wrong", std::make_shared<always_wrong_draft>()}};
    for (auto const& [name, source] : sources) {
      INFO((seeded ? "seeded, " : "greedy, ") << "drafts: " << name);
      auto const got = serve_hybrid(reqs, 4, source);
      check_same(got, plain);
      CHECK(got.drafted > 0);
      if (name == "replay") CHECK(got.accepted == got.drafted);
      if (name != "replay") CHECK(got.accepted < got.drafted);
    }
  }
  // Too few slots for a draft slot per lane: drafts stay off, replies unchanged.
  hybrid_toy_model small(96, 16, 8);
  auto const reqs = mixed_requests(false);
  auto const off = serve_on<hybrid_toy_family>(small, reqs, 4, nullptr);
  draft_config d;
  d.source = std::make_shared<always_wrong_draft>();
  lane_host<hybrid_toy_model, hybrid_toy_family> host(small, {4, 512, 64, 64}, nullptr, d);
  CHECK_FALSE(host.drafting());
  CHECK(off.drafted == 0);
}

namespace {

// The toy model, recording each decode round: the streams in it and the drafts their rows carry.
// A decode row is one pending token, plus its drafts with a logits row per token; a prompt chunk
// of several tokens gives only its last row.
class round_recorder {
 public:
  struct round {
    std::size_t streams = 0, drafts = 0, most_in_a_row = 0, drafting_rows = 0;
  };
  round_recorder() : toy_(96, 16) {}
  std::size_t vocab_size() const { return toy_.vocab_size(); }
  std::size_t page_tokens() const { return toy_.page_tokens(); }
  std::size_t num_pages() const { return toy_.num_pages(); }
  void copy_page(std::int32_t from, std::int32_t to) { toy_.copy_page(from, to); }
  void forward(std::span<batch_row const> rows, float* logits) {
    if (std::all_of(rows.begin(), rows.end(),
                    [](batch_row const& r) { return r.all_logits || r.tokens.size() == 1; })) {
      round r{rows.size(), 0, 0, 0};
      for (auto const& row : rows) {
        r.drafts += row.tokens.size() - 1;
        r.most_in_a_row = std::max(r.most_in_a_row, row.tokens.size() - 1);
        r.drafting_rows += row.tokens.size() > 1;
      }
      rounds.push_back(r);
    }
    toy_.forward(rows, logits);
  }
  std::vector<round> rounds;

 private:
  toy_model toy_;
};

}  // namespace

TEST_CASE("a round's fixed part in rows is fitted from the rounds' own times") {
  round_cost_fit fit;
  CHECK_FALSE(fit.fixed_rows());
  // t = 2 ms + 0.5 ms a row: the fixed part is 4 rows' worth; one stream at 1 or 9 rows.
  for (int i = 0; i < 7; ++i) fit.add(i % 2 ? 9.0 : 1.0, 0.002 + 0.0005 * (i % 2 ? 9 : 1));
  CHECK_FALSE(fit.fixed_rows());  // under 8 rounds
  fit.add(9.0, 0.002 + 0.0005 * 9);
  REQUIRE(fit.fixed_rows());
  CHECK(*fit.fixed_rows() == Approx(4.0).epsilon(1e-6));
  // A machine where eight rows are arithmetic already: a round's time grows with every row.
  round_cost_fit busy;
  for (int i = 0; i < 40; ++i) busy.add(i % 3 ? 8.0 : 40.0, i % 3 ? 0.034 : 0.183);
  REQUIRE(busy.fixed_rows());
  CHECK(*busy.fixed_rows() == Approx(0.0));  // clamped: 8 rows at 4.25 ms each, 40 at 4.6
  draft_config d;
  CHECK(d.pays_at(8, *busy.fixed_rows()) == Approx(1.0));  // drafts never pay beside 7 others
  // Rounds that all run the same rows cannot tell the fixed part from the rows' part.
  round_cost_fit same;
  for (int i = 0; i < 40; ++i) same.add(8.0, 0.03 + 0.001 * (i % 5));
  CHECK_FALSE(same.fixed_rows());
  // More rows that took no longer (a noisy machine) give no fit either.
  round_cost_fit noisy;
  for (int i = 0; i < 40; ++i) noisy.add(i % 2 ? 9.0 : 1.0, i % 2 ? 0.004 : 0.005);
  CHECK_FALSE(noisy.fixed_rows());
}

TEST_CASE("a round drafts beside other streams only while their acceptance pays; it shares 32") {
  draft_config const d;
  CHECK(d.pays_at(1) == Approx(1 / 2.25));
  CHECK(d.pays_at(8) == Approx(8 / 9.25));
  for (bool seeded : {false, true}) {
    INFO((seeded ? "seeded" : "greedy"));
    // Short prompts and long replies, so all eight decode together for many rounds.
    auto reqs = mixed_requests(seeded);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].prompt.resize(3 + i);
      reqs[i].max_tokens = 160;
    }
    auto const plain = serve_all(reqs, 8, nullptr);
    auto const seqs = sequences(reqs, plain);
    {
      // Always right: every stream keeps drafting; 8 x 6 wanted, 32 given, 4 to each.
      round_recorder model;
      auto const got =
          serve_on<toy_family>(model, reqs, 8, std::make_shared<replay_draft>(seqs), true);
      check_same(got, plain);
      CHECK(got.accepted == got.drafted);
      bool shared = false;
      std::size_t counted = 0;
      for (auto const& r : model.rounds) {
        INFO(r.streams << " streams, " << r.drafts << " drafts, " << r.most_in_a_row
                       << " in a row");
        CHECK(r.drafts <= 32);
        shared = shared || (r.streams == 8 && r.drafts == 32 && r.most_in_a_row == 4);
        counted += r.drafts;
      }
      CHECK(counted == got.drafted);
      if (!seeded) CHECK(shared);  // seeded replies end sooner: fewer rounds of all eight
    }
    // Right at every other position (half accepted): enough alone (1 / 2.25), too little beside
    // seven other streams (8 / 9.25), where a round drafts only once the streams regained trust.
    auto const half = std::make_shared<replay_draft>(seqs, 1);
    round_recorder eight;
    check_same(serve_on<toy_family>(eight, reqs, 8, half, true), plain);
    std::size_t rows = 0, drafting = 0;
    for (auto const& r : eight.rounds)
      if (r.streams == 8) {
        rows += r.streams;
        drafting += r.drafting_rows;
      }
    if (!seeded) CHECK(rows > 8 * 50);
    if (!seeded) CHECK(drafting > 0);
    CHECK(drafting * 5 < rows);
    round_recorder solo;
    auto const one = serve_on<toy_family>(solo, {reqs[0]}, 8, half, true);
    check_same(one, serve_all({reqs[0]}, 8, nullptr));
    std::size_t solo_drafting = 0;
    for (auto const& r : solo.rounds) solo_drafting += r.drafting_rows;
    CHECK(solo_drafting * 10 > solo.rounds.size() * 9);
  }
}

TEST_CASE("drafts that keep failing pause: far fewer drafted tokens than rounds x max") {
  auto reqs = mixed_requests(false);
  auto const r = serve_all(reqs, 8, std::make_shared<always_wrong_draft>());
  std::size_t generated = 0;
  for (auto const& rep : r.replies) generated += rep.tokens.size();
  // Without a pause every one of the ~generated rounds would draft 6 tokens.
  CHECK(r.drafted > 0);
  CHECK(r.drafted * 4 < generated * 6);
}

TEST_CASE("1,000 drafted requests with cancels and prompts past the pool leave a balanced pool") {
  toy_model model(40, 16);
  draft_config drafts;
  drafts.source = std::make_shared<toy_greedy_draft>(3);
  drafts.max_tokens = 8;
  drafts.measure_rows = false;  // the toy's round times would decide whether rounds draft
  metrics m;
  lane_host<toy_model, toy_family> host(model, {4, 2048, 2000, 32}, &m, drafts);
  std::mt19937 gen(42);
  std::vector<std::shared_ptr<request_stream>> live;
  std::size_t refused = 0, cancelled = 0;
  for (int i = 0; i < 1000; ++i) {
    auto const len = std::uniform_int_distribution<std::size_t>(1, i % 50 == 0 ? 800 : 120)(gen);
    std::string text(len, static_cast<char>('a' + i % 26));
    auto req = make_request(text, std::uniform_int_distribution<int>(1, 40)(gen));
    if (i % 3 == 0) {
      req.sampling.temperature = 0.8f;
      req.sampling.seed = static_cast<std::uint64_t>(i);
    }
    auto s = host.submit(std::move(req));
    if (s.status == submit_status::rejected) {
      ++refused;
      continue;
    }
    if (i % 7 == 0) {
      s.stream->cancel();
      ++cancelled;
    }
    live.push_back(s.stream);
    if (live.size() >= 16) {
      for (auto& st : live) drain(st);
      live.clear();
    }
  }
  for (auto& st : live) drain(st);
  auto const c = host.shutdown(0ms);
  CHECK(c.balanced());
  CHECK(c.free + c.store == 40);
  CHECK(refused > 0);  // the 800-token prompts are larger than the 40 x 16-token pool
  CHECK(cancelled > 0);
  CHECK(m.draft_tokens.load() > m.draft_accepted.load());
  CHECK(m.draft_accepted.load() > 0);
}

TEST_CASE("the metrics name the draft source and give vLLM's spec-decode counters") {
  metrics m;
  m.draft_source = "ngram";
  m.draft_rows = 3;
  m.draft_tokens = 12;
  m.draft_accepted = 5;
  auto const text = m.prometheus({}, "x");
  CHECK(text.find("tf_draft_tokens_total{source=\"ngram\"} 12") != std::string::npos);
  CHECK(text.find("tf_draft_accepted_tokens_total{source=\"ngram\"} 5") != std::string::npos);
  CHECK(text.find("vllm:spec_decode_num_draft_tokens_total{model_name=\"x\"} 12") !=
        std::string::npos);
  CHECK(text.find("vllm:spec_decode_num_accepted_tokens_total{model_name=\"x\"} 5") !=
        std::string::npos);
  CHECK(text.find("vllm:spec_decode_num_drafts_total{model_name=\"x\"} 3") != std::string::npos);
}
