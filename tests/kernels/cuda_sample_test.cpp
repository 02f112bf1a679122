// The sampling kernels' order (kernels/portable/sample_math.hpp's sample_row_reference, the host
// copy of kernels/cuda/sample.cuh) against tf::sample::sampler over thousands of random rows: vocab
// sizes up to 262144, ties, -inf entries, temperatures, top-k / top-p / min-p, penalties over
// histories, logit biases and several draws per seed. The tokens must be equal (both follow one
// specified candidate order; they could differ only where a draw lands within rounding of a
// boundary, which random uniforms do not hit); logprobs within 1e-5 + 1e-6 |logprob| (the CPU's
// log-sum-exp uses a float exp); top logprobs the same tokens in the same order.
#include <kernels/portable/sample_math.hpp>
#include <tf/sample/sampler.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace sm = tf::kernels::portable::sample_math;
using tf::sample::sample_result;
using tf::sample::sampler;
using tf::sample::sampling_params;

namespace {

constexpr float inf = std::numeric_limits<float>::infinity();

// A row of n logits of one of several shapes: normal, a few levels (many ties), sparse -inf,
// one sharp peak.
std::vector<float> random_row(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> shape(0, 3), level(0, 5);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> v(n);
  int const s = shape(rng);
  for (auto& x : v) {
    x = s == 1 ? 0.5f * static_cast<float>(level(rng)) : normal(rng);
    if (s == 2 && unit(rng) < 0.3f) x = -inf;
  }
  if (s == 3) v[std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)] += 15.0f;
  if (s == 2 && std::isinf(v[0])) v[0] = 0.0f;  // at least one finite logit
  return v;
}

sampling_params random_params(std::size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 9);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  sampling_params p;
  int const kind = pick(rng);
  p.temperature = kind == 0 ? 0.0f : std::array{0.3f, 0.7f, 1.0f, 1.5f}[pick(rng) % 4];
  if (pick(rng) < 4) p.top_k = std::uniform_int_distribution<int>(1, 80)(rng);
  if (pick(rng) < 4) p.top_p = 0.05f + 0.95f * unit(rng);
  if (pick(rng) < 3) p.min_p = 0.3f * unit(rng);
  if (pick(rng) < 4) {
    p.repetition_penalty = 0.5f + 1.5f * unit(rng);
    p.presence_penalty = unit(rng) - 0.3f;
    p.frequency_penalty = 0.7f * unit(rng);
  }
  if (pick(rng) < 3)
    for (int i = 0; i < 3; ++i)
      p.logit_bias.push_back({static_cast<std::int32_t>(rng() % n), 20.0f * unit(rng) - 10.0f});
  p.seed = rng();
  p.top_logprobs = pick(rng) < 3 ? std::uniform_int_distribution<int>(1, 20)(rng) : 0;
  p.logprobs = pick(rng) != 0;
  return p;
}

// Within 1e-5 + 1e-6 |a| (equal infinities included).
bool close(float a, float b) {
  return a == b || std::abs(static_cast<double>(a) - b) <= 1e-5 + 1e-6 * std::abs(a);
}

struct tally {
  int rows = 0, draws = 0, cut_draws = 0, greedy = 0;
  double max_logprob_err = 0.0;
};

// One request's steps on both: the CPU sampler and the device row through the reference.
void compare(std::vector<float> const& logits, sampling_params const& p,
             std::vector<std::int32_t> history, int steps, tally& t) {
  auto const n = logits.size();
  sampler cpu(p), dev(p);
  REQUIRE(dev.device_eligible());
  for (int s = 0; s < steps; ++s) {
    sample_result const a = cpu.sample(logits, history);
    std::vector<sm::logit_adjust> adjust;
    auto const row = dev.device_row(n, history, adjust);
    auto const b =
        sm::sample_row_reference(logits.data(), static_cast<std::int64_t>(n), row, adjust.data());
    INFO("vocab " << n << " step " << s << " T " << p.temperature << " k " << p.top_k << " p "
                  << p.top_p << " min_p " << p.min_p << " rep " << p.repetition_penalty << " seed "
                  << p.seed);
    REQUIRE(b.status == sm::sampled);
    REQUIRE(a.token == b.token);
    if (std::isnan(a.logprob)) {
      CHECK(std::isnan(b.logprob));
    } else {
      CHECK(close(a.logprob, b.logprob));
      if (std::isfinite(a.logprob))
        t.max_logprob_err =
            std::max(t.max_logprob_err, std::abs(static_cast<double>(a.logprob) - b.logprob));
    }
    REQUIRE(static_cast<std::size_t>(b.top_count) == a.top.size());
    for (std::size_t k = 0; k < a.top.size(); ++k) {
      CHECK(a.top[k].token == b.top_token[k]);
      CHECK(close(a.top[k].logprob, b.top_logprob[k]));
    }
    ++t.draws;
    if (p.temperature == 0.0f)
      ++t.greedy;
    else if (sm::has_cut(p.top_k, p.top_p, p.min_p, static_cast<std::int64_t>(n)))
      ++t.cut_draws;
    history.push_back(a.token);
  }
  ++t.rows;
}

}  // namespace

TEST_CASE("the device's sampling order picks the CPU sampler's tokens over random rows") {
  std::mt19937 rng(20261206);
  tally t;
  auto run = [&](std::size_t n, int rows, int steps) {
    for (int r = 0; r < rows; ++r) {
      auto const logits = random_row(n, rng);
      auto const p = random_params(n, rng);
      std::vector<std::int32_t> history;
      auto const len = rng() % 12;
      for (std::size_t i = 0; i < len; ++i) history.push_back(static_cast<std::int32_t>(rng() % n));
      compare(logits, p, history, steps, t);
    }
  };
  run(1, 50, 3);
  run(2, 200, 3);
  run(7, 400, 3);
  run(100, 800, 3);
  run(1000, 600, 3);
  run(32000, 60, 2);
  run(262144, 12, 2);
  WARN("rows " << t.rows << ", draws " << t.draws << " (" << t.greedy << " greedy, " << t.cut_draws
               << " with a cut); largest logprob difference " << t.max_logprob_err);
  CHECK(t.cut_draws > 1000);
  CHECK(t.draws - t.greedy - t.cut_draws > 500);
}

TEST_CASE("ties rank by index, -0 with +0, and a NaN below everything") {
  CHECK(sm::rank_key(1.0f, 3) > sm::rank_key(1.0f, 4));
  CHECK(sm::rank_key(2.0f, 9) > sm::rank_key(1.0f, 0));
  CHECK(sm::rank_key(-0.0f, 2) > sm::rank_key(0.0f, 5));
  CHECK(sm::rank_key(-0.0f, 5) < sm::rank_key(0.0f, 2));
  CHECK(sm::rank_key(-inf, 7) > sm::rank_key(std::nanf(""), 0));
  CHECK(sm::rank_key(-1.0f, 0) > sm::rank_key(-2.0f, 0));
  CHECK(sm::rank_index(sm::rank_key(0.5f, 262143)) == 262143);
  // Greedy over tied logits: the lowest index, on both.
  std::vector<float> l{1.0f, 3.0f, 3.0f, -inf, 3.0f};
  sampler cpu({}), dev({});
  std::vector<sm::logit_adjust> adjust;
  auto const row = dev.device_row(l.size(), {}, adjust);
  CHECK(cpu.sample(l).token == 1);
  CHECK(sm::sample_row_reference(l.data(), 5, row, adjust.data()).token == 1);
}

TEST_CASE("a row with no finite logit or none left after the penalties fails on both") {
  std::vector<float> const none(4, -inf);
  sampler cpu({}), dev({});
  std::vector<sm::logit_adjust> adjust;
  auto const row = dev.device_row(none.size(), {}, adjust);
  CHECK_THROWS_WITH(cpu.sample(none), Catch::Contains("no finite logit"));
  CHECK(sm::sample_row_reference(none.data(), 4, row, adjust.data()).status == sm::no_finite_logit);
  // The repetition penalty multiplies the two huge negative logits past -inf.
  std::vector<float> const huge{-3e38f, -3e38f};
  std::vector<std::int32_t> const history{0, 1};
  sampling_params const p{.temperature = 1.0f, .repetition_penalty = 10.0f};
  sampler cpu2(p), dev2(p);
  auto const row2 = dev2.device_row(huge.size(), history, adjust);
  CHECK_THROWS_WITH(cpu2.sample(huge, history), Catch::Contains("every logit is -inf"));
  CHECK(sm::sample_row_reference(huge.data(), 2, row2, adjust.data() + row2.adjust_begin).status ==
        sm::all_masked);
}

TEST_CASE("the running sums follow the chunked scan: starts, the last sum, the first crossing") {
  // Weights 1 .. n: every running sum is an exact integer, so the kernel's order must give
  // exactly n (n + 1) / 2 and the crossing of u at the index a sequential walk finds.
  for (std::int64_t n : {1, 5, 511, 512, 513, 1000, 4097}) {
    auto const e = [](std::int64_t j) { return static_cast<double>(j + 1); };
    double last = 0.0;
    auto const j = sm::first_running(
        n, e, [](double c) { return c >= 10.0; }, last);
    CHECK(last == static_cast<double>(n) * static_cast<double>(n + 1) / 2);
    CHECK(j == (n >= 4 ? 3 : n));  // 1 + 2 + 3 + 4 = 10 at index 3
    CHECK(sm::draw_index(n, e, 0.0) == 0);
    CHECK(sm::draw_index(n, e, 0.999999999) == n - 1);
  }
}
