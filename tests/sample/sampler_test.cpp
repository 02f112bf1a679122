#include <tf/sample/sampler.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

using tf::sample::sampler;
using tf::sample::sampling_params;

namespace {

std::vector<float> logits_of_probs(std::vector<double> const& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

std::map<int, int> histogram(sampling_params p, std::vector<float> const& logits, int draws,
                             std::vector<std::int32_t> const& history = {}) {
  sampler s(p);
  std::map<int, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits, history).token];
  return h;
}

}  // namespace

TEST_CASE("greedy picks the largest logit, first index on a tie") {
  sampler s({});
  std::vector<float> l{0.1f, 2.0f, -1.0f, 2.0f};
  auto r = s.sample(l);
  CHECK(r.token == 1);
  double lse = 0;
  for (float v : l) lse += std::exp(v);
  CHECK(r.logprob == Approx(2.0 - std::log(lse)).margin(1e-6));
}

TEST_CASE("with logprobs off the token is the same, its logprob NaN, and bad logits still throw") {
  std::vector<float> l;
  for (int i = 0; i < 5000; ++i) l.push_back(static_cast<float>(std::sin(i * 0.37) * 3));
  l[4321] = 7.0f;
  std::vector<std::int32_t> const history{4321, 5, 5};
  for (sampling_params p : {sampling_params{}, sampling_params{.repetition_penalty = 3.0f},
                            sampling_params{.temperature = 0.8f, .seed = 9}}) {
    sampler on(p);
    p.logprobs = false;
    sampler off(p);
    for (int i = 0; i < 20; ++i) {
      auto a = on.sample(l, history);
      auto b = off.sample(l, history);
      CHECK(a.token == b.token);
      CHECK(std::isfinite(a.logprob));
      CHECK(std::isnan(b.logprob));
    }
  }
  CHECK(sampler({.logprobs = false}).sample(l).token == 4321);
  sampling_params off{.logprobs = false};
  std::vector<float> bad(8, std::numeric_limits<float>::quiet_NaN());
  CHECK_THROWS_WITH(sampler(off).sample(bad), Catch::Contains("no finite logit"));
  bad.assign(8, -std::numeric_limits<float>::infinity());
  CHECK_THROWS_WITH(sampler(off).sample(bad), Catch::Contains("no finite logit"));
  // top_logprobs needs the normalizer, so it computes the logprob whatever `logprobs` says.
  off.top_logprobs = 2;
  auto r = sampler(off).sample(l);
  CHECK(std::isfinite(r.logprob));
  REQUIRE(r.top.size() == 2);
  CHECK(r.top[0].logprob == Approx(r.logprob));
}

TEST_CASE("the same seed gives the same stream, another seed another one") {
  std::vector<float> l;
  for (int i = 0; i < 1000; ++i) l.push_back(static_cast<float>(std::sin(i * 0.37) * 3));
  auto run = [&](std::uint64_t seed) {
    sampler s({.temperature = 1.0f, .seed = seed});
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(l).token);
    return out;
  };
  CHECK(run(7) == run(7));
  CHECK(run(7) != run(8));
}

TEST_CASE("temperature sampling follows softmax(logits / T)") {
  std::vector<float> l{1.0f, 0.0f, -1.0f};
  float const t = 0.7f;
  int const draws = 40000;
  auto h = histogram({.temperature = t, .seed = 1}, l, draws);
  double z = 0;
  for (float v : l) z += std::exp(v / t);
  for (int i = 0; i < 3; ++i) {
    double expect = std::exp(l[i] / t) / z;
    CHECK(h[i] / double(draws) == Approx(expect).margin(0.01));
  }
}

TEST_CASE("top-k keeps exactly the k best") {
  std::vector<float> l{0.0f, 3.0f, 1.0f, 2.9f, 2.8f, -5.0f};
  auto h = histogram({.temperature = 5.0f, .top_k = 3, .seed = 3}, l, 3000);
  CHECK(h.size() == 3);
  CHECK(h.count(1) == 1);
  CHECK(h.count(3) == 1);
  CHECK(h.count(4) == 1);
  auto one = histogram({.temperature = 5.0f, .top_k = 1, .seed = 3}, l, 200);
  CHECK(one.size() == 1);
  CHECK(one.begin()->first == 1);
}

TEST_CASE("top-p keeps the smallest prefix reaching p") {
  auto l = logits_of_probs({0.05, 0.5, 0.15, 0.3});
  auto h = histogram({.temperature = 1.0f, .top_p = 0.7f, .seed = 5}, l, 4000);
  CHECK(std::set<int>{1, 3} == [&] {
    std::set<int> s;
    for (auto [k, v] : h) s.insert(k);
    return s;
  }());
  // Renormalised inside the nucleus: 0.5 / 0.8 and 0.3 / 0.8.
  CHECK(h[1] / 4000.0 == Approx(0.625).margin(0.03));
  auto wide = histogram({.temperature = 1.0f, .top_p = 0.96f, .seed = 5}, l, 4000);
  CHECK(wide.size() == 4);
}

TEST_CASE("top-p over a large vocabulary grows past the first sorted block") {
  std::vector<float> l(5000, 0.0f);  // flat: the nucleus at 0.5 is 2500 tokens
  auto h = histogram({.temperature = 1.0f, .top_p = 0.5f, .seed = 9}, l, 3000);
  int max_tok = 0;
  for (auto [k, v] : h) max_tok = std::max(max_tok, k);
  CHECK(h.size() > 1500);
  CHECK(max_tok <= 2500);  // ties keep the lowest ids (one more for rounding)
}

TEST_CASE("min-p drops tokens below min_p times the best") {
  auto l = logits_of_probs({0.5, 0.3, 0.15, 0.05});
  auto h = histogram({.temperature = 1.0f, .min_p = 0.4f, .seed = 11}, l, 3000);
  CHECK(h.size() == 2);
  CHECK(h.count(0) == 1);
  CHECK(h.count(1) == 1);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits") {
  std::vector<float> l{2.0f, 1.5f, -0.5f, -0.6f};
  std::vector<std::int32_t> hist{0};
  sampler plain({});
  CHECK(plain.sample(l, hist).token == 0);
  sampler rep({.repetition_penalty = 2.0f});
  CHECK(rep.sample(l, hist).token == 1);  // 2.0 / 2 = 1.0 < 1.5
  // Negative: -0.5 * 2 = -1.0 drops below -0.6.
  std::vector<float> neg{-0.5f, -0.6f};
  std::vector<std::int32_t> h0{0};
  CHECK(rep.sample(neg, h0).token == 1);
  // The reported logprob is the model's, not the penalised one.
  auto r = rep.sample(l, hist);
  double lse = 0;
  for (float v : l) lse += std::exp(v);
  CHECK(r.logprob == Approx(1.5 - std::log(lse)).margin(1e-6));
}

TEST_CASE("presence and frequency penalties") {
  std::vector<float> l{1.0f, 0.8f, 0.0f};
  std::vector<std::int32_t> hist{0, 0, 0, 1};
  sampler pres({.presence_penalty = 0.5f});  // 0.5, 0.3, 0.0
  CHECK(pres.sample(l, hist).token == 0);
  sampler freq({.frequency_penalty = 0.2f});  // 1 - 0.6 = 0.4, 0.8 - 0.2 = 0.6, 0
  CHECK(freq.sample(l, hist).token == 1);
  sampler both({.presence_penalty = 0.5f, .frequency_penalty = 0.2f});  // -0.1, 0.1, 0
  CHECK(both.sample(l, hist).token == 1);
  sampler big({.presence_penalty = 1.0f, .frequency_penalty = 0.2f});  // -0.6, -0.4, 0
  CHECK(big.sample(l, hist).token == 2);
}

TEST_CASE("top logprobs are the best alternatives, best first, under the model") {
  std::vector<float> l{0.5f, 3.0f, 1.0f, 2.0f, 1.0f};
  sampler s({.top_logprobs = 3});
  auto r = s.sample(l);
  REQUIRE(r.top.size() == 3);
  CHECK(r.top[0].token == 1);
  CHECK(r.top[1].token == 3);
  CHECK(r.top[2].token == 2);  // tie with 4: lower id first
  CHECK(r.top[0].logprob == Approx(r.logprob));
  double total = 0;
  for (float v : l) total += std::exp(v);
  CHECK(r.top[1].logprob == Approx(2.0 - std::log(total)).margin(1e-6));
  sampler wide({.top_logprobs = 20});
  CHECK(wide.sample(l).top.size() == l.size());
}

TEST_CASE("bad parameters and inputs throw tf::error") {
  CHECK_THROWS_AS(sampler({.temperature = -1.0f}), tf::error);
  CHECK_THROWS_AS(sampler({.top_k = -2}), tf::error);
  CHECK_THROWS_AS(sampler({.top_p = 0.0f}), tf::error);
  CHECK_THROWS_AS(sampler({.top_p = 1.5f}), tf::error);
  CHECK_THROWS_AS(sampler({.min_p = 2.0f}), tf::error);
  CHECK_THROWS_AS(sampler({.repetition_penalty = 0.0f}), tf::error);
  sampler s({.repetition_penalty = 1.1f});
  std::vector<float> empty;
  CHECK_THROWS_AS(s.sample(empty), tf::error);
  std::vector<float> l{1.0f, 2.0f};
  std::vector<std::int32_t> bad{5};
  CHECK_THROWS_AS(s.sample(l, bad), tf::error);
  std::vector<float> nan{NAN, NAN};
  CHECK_THROWS_AS(s.sample(nan), tf::error);
}

TEST_CASE("logit_bias: added before the draw, greedy or sampled; logprobs stay the model's") {
  std::vector<float> const l{0.0f, 1.0f, 2.0f, 0.5f};
  sampling_params p;
  p.logit_bias = {{0, 5.0f}};
  auto r = sampler(p).sample(l);
  CHECK(r.token == 0);  // 0 + 5 beats 2
  double lse = 0;
  for (float v : l) lse += std::exp(v);
  CHECK(r.logprob == Approx(0.0 - std::log(lse)).margin(1e-6));  // the raw row's logprob
  p.logit_bias = {{2, -100.0f}};
  CHECK(sampler(p).sample(l).token == 1);  // the best is banned: the next one
  // Sampled: +100 on one token of four equal ones takes every draw.
  sampling_params s;
  s.temperature = 1.0f;
  s.seed = 11;
  s.logit_bias = {{2, 100.0f}};
  auto h = histogram(s, {0.0f, 0.0f, 0.0f, 0.0f}, 200);
  CHECK(h.size() == 1);
  CHECK(h[2] == 200);
  // Without a bias the same seed spreads over all four.
  s.logit_bias.clear();
  CHECK(histogram(s, {0.0f, 0.0f, 0.0f, 0.0f}, 200).size() == 4);
}

TEST_CASE("logit_bias touches only its own request: the shared logits row is unchanged") {
  std::vector<float> const row{0.3f, 0.1f, 0.7f};
  auto const before = row;
  sampling_params biased;
  biased.logit_bias = {{1, 50.0f}};
  CHECK(sampler(biased).sample(row).token == 1);
  CHECK(row == before);
  CHECK(sampler({}).sample(row).token == 2);  // a neighbour in the batch sees the model's row
}

TEST_CASE("logit_bias: an id outside the vocabulary or a non-finite bias is an error") {
  sampling_params p;
  p.logit_bias = {{4, 1.0f}};
  sampler s(p);
  std::vector<float> const l{0.0f, 1.0f, 2.0f};
  CHECK_THROWS_AS(s.sample(l), tf::error);
  p.logit_bias = {{-1, 1.0f}};
  CHECK_THROWS_AS(sampler(p), tf::error);
  p.logit_bias = {{0, std::numeric_limits<float>::infinity()}};
  CHECK_THROWS_AS(sampler(p), tf::error);
}

namespace {

// The token a draw picks from `weights` walked in `order` with the uniform u: the first whose
// running sum passes u times the total (kernels/portable/sample_math.hpp's draw).
int walk(std::vector<double> const& weights, std::vector<int> const& order, double u) {
  double total = 0.0;
  for (int i : order) total += weights[static_cast<std::size_t>(i)];
  double c = 0.0;
  for (int i : order) {
    c += weights[static_cast<std::size_t>(i)];
    if (u * total < c) return i;
  }
  return order.back();
}

}  // namespace

TEST_CASE("a draw walks a specified order: index order without a cut, ranked with one") {
  std::vector<float> const l{std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)};
  float const mx = *std::max_element(l.begin(), l.end());
  std::vector<double> w;
  for (float v : l) w.push_back(std::exp(static_cast<double>(v) - mx));
  // The same seed's uniforms, one per draw, predict each token.
  tf::sample::rng stream(5);
  sampler plain({.temperature = 1.0f, .seed = 5});
  sampler top3({.temperature = 1.0f, .top_k = 3, .seed = 5});
  tf::sample::rng stream3(5);
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) {
    int const token = plain.sample(l).token;
    CHECK(token == walk(w, {0, 1, 2, 3}, stream.uniform()));
    CHECK(top3.sample(l).token == walk(w, {1, 3, 2}, stream3.uniform()));
    seen.insert(token);
  }
  CHECK(seen.size() == 4);
}

TEST_CASE("top_k above the first sorted 64 keeps all k candidates") {
  // 200 equal logits: the ranking is by index, so top_k 100 draws from tokens 0..99.
  std::vector<float> const l(200, 0.0f);
  auto h = histogram({.temperature = 1.0f, .top_k = 100, .seed = 3}, l, 4000);
  CHECK(h.begin()->first == 0);
  CHECK(h.rbegin()->first == 99);
  CHECK(h.size() == 100);
}
