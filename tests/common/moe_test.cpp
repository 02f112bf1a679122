#include <families/common/moe.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_view.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace tf::families::moe;

namespace {

constexpr std::int64_t hidden = 12, n_ff = 8, n_expert = 4;

// Experts stored as one stacked F32 tensor per projection, as GGUF's ffn_*_exps.
struct stacked {
  std::vector<float> gate, up, down;
  std::vector<expert_weights> experts;

  explicit stacked(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 0.5f);
    auto fill = [&](std::vector<float>& v, std::int64_t n) {
      v.resize(static_cast<std::size_t>(n));
      for (auto& x : v) x = d(rng);
    };
    fill(gate, n_expert * n_ff * hidden);
    fill(up, n_expert * n_ff * hidden);
    fill(down, n_expert * hidden * n_ff);
    auto slice = [](std::vector<float> const& v, std::int64_t rows, std::int64_t cols) {
      tf::model::tensor_view t;
      t.name = "blk.0.ffn_x_exps.weight";
      t.type = tf::model::tensor_type::f32;
      t.dims = {cols, rows, n_expert};
      t.data = reinterpret_cast<std::byte const*>(v.data());
      t.bytes = v.size() * sizeof(float);
      return stacked_experts(t, rows, cols, n_expert);
    };
    auto g = slice(gate, n_ff, hidden), u = slice(up, n_ff, hidden), dn = slice(down, hidden, n_ff);
    for (std::int64_t e = 0; e < n_expert; ++e)
      experts.push_back({g[static_cast<std::size_t>(e)], u[static_cast<std::size_t>(e)],
                         dn[static_cast<std::size_t>(e)]});
  }

  // The SwiGLU of expert e on one row, in double straight from the stacked arrays.
  std::vector<double> reference(std::int64_t e, float const* x) const {
    std::vector<double> h(static_cast<std::size_t>(n_ff)), y(static_cast<std::size_t>(hidden));
    for (std::int64_t f = 0; f < n_ff; ++f) {
      double gs = 0, us = 0;
      for (std::int64_t c = 0; c < hidden; ++c) {
        gs += double(gate[static_cast<std::size_t>((e * n_ff + f) * hidden + c)]) * x[c];
        us += double(up[static_cast<std::size_t>((e * n_ff + f) * hidden + c)]) * x[c];
      }
      h[static_cast<std::size_t>(f)] = gs / (1.0 + std::exp(-gs)) * us;
    }
    for (std::int64_t r = 0; r < hidden; ++r)
      for (std::int64_t f = 0; f < n_ff; ++f)
        y[static_cast<std::size_t>(r)] +=
            double(down[static_cast<std::size_t>((e * hidden + r) * n_ff + f)]) *
            h[static_cast<std::size_t>(f)];
    return y;
  }
};

std::vector<float> random_rows(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * hidden));
  for (auto& v : x) v = d(rng);
  return x;
}

}  // namespace

TEST_CASE("top_k picks the highest scores, ties to the lower expert") {
  float const scores[] = {0.1f, 0.7f, 0.3f, 0.7f, 0.3f};
  expert_pick p[3];
  top_k(scores, 5, 3, p);
  CHECK(p[0].expert == 1);
  CHECK(p[1].expert == 3);
  CHECK(p[2].expert == 2);
  CHECK(p[0].weight == 0.7f);
  CHECK(p[2].weight == 0.3f);
  CHECK_THROWS_AS(top_k(scores, 5, 6, p), tf::error);
}

TEST_CASE("run_experts matches the per-expert SwiGLU sum") {
  stacked w(7);
  thread_pool pool(2);
  std::int64_t const rows = 3;
  auto x = random_rows(rows, 11);
  std::vector<expert_pick> picks{{2, 0.6f}, {0, 0.4f}, {1, 0.9f}, {2, 0.1f}, {3, 0.5f}, {1, 0.5f}};
  std::vector<float> out(static_cast<std::size_t>(rows * hidden), 1.0f);  // added to, not replaced
  run_experts(pool, w.experts, x.data(), rows, picks.data(), 2, out.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<double> want(static_cast<std::size_t>(hidden), 1.0);
    for (int s = 0; s < 2; ++s) {
      auto const& p = picks[static_cast<std::size_t>(r * 2 + s)];
      auto y = w.reference(p.expert, x.data() + r * hidden);
      for (std::int64_t c = 0; c < hidden; ++c)
        want[static_cast<std::size_t>(c)] += p.weight * y[static_cast<std::size_t>(c)];
    }
    for (std::int64_t c = 0; c < hidden; ++c)
      CHECK(out[static_cast<std::size_t>(r * hidden + c)] ==
            Approx(want[static_cast<std::size_t>(c)]).margin(1e-5));
  }
}

TEST_CASE("run_experts gives a row the same bits alone or in a batch, on 1 or 2 threads") {
  stacked w(3);
  thread_pool one(1), two(2);
  std::int64_t const rows = 5;
  auto x = random_rows(rows, 5);
  std::vector<expert_pick> picks;
  for (std::int64_t r = 0; r < rows; ++r) {
    picks.push_back({static_cast<std::int32_t>(r % n_expert), 0.7f});
    picks.push_back({static_cast<std::int32_t>((r + 1) % n_expert), 0.3f});
  }
  std::vector<float> batch(static_cast<std::size_t>(rows * hidden), 0.0f);
  run_experts(two, w.experts, x.data(), rows, picks.data(), 2, batch.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<float> alone(static_cast<std::size_t>(hidden), 0.0f);
    run_experts(one, w.experts, x.data() + r * hidden, 1, picks.data() + r * 2, 2, alone.data());
    CHECK(std::memcmp(alone.data(), batch.data() + r * hidden, alone.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("run_experts never reads an expert nobody picked") {
  stacked w(9);
  // Poison expert 3: a read of it would put NaN into the output.
  std::vector<float> nan(static_cast<std::size_t>(n_ff * hidden),
                         std::numeric_limits<float>::quiet_NaN());
  w.experts[3].gate.data = reinterpret_cast<std::byte const*>(nan.data());
  w.experts[3].up.data = reinterpret_cast<std::byte const*>(nan.data());
  w.experts[3].down.data = reinterpret_cast<std::byte const*>(nan.data());
  thread_pool pool(1);
  auto x = random_rows(2, 1);
  std::vector<expert_pick> picks{{0, 0.5f}, {1, 0.5f}, {2, 1.0f}, {0, 0.2f}};
  std::vector<float> out(static_cast<std::size_t>(2 * hidden), 0.0f);
  run_experts(pool, w.experts, x.data(), 2, picks.data(), 2, out.data());
  for (float v : out) CHECK(std::isfinite(v));
  picks[1].expert = 4;
  CHECK_THROWS_AS(run_experts(pool, w.experts, x.data(), 2, picks.data(), 2, out.data()),
                  tf::error);
}

TEST_CASE("stacked_experts rejects a tensor of the wrong shape or size") {
  std::vector<float> v(static_cast<std::size_t>(n_expert * n_ff * hidden));
  tf::model::tensor_view t;
  t.name = "blk.3.ffn_gate_exps.weight";
  t.type = tf::model::tensor_type::f32;
  t.dims = {hidden, n_ff, n_expert};
  t.data = reinterpret_cast<std::byte const*>(v.data());
  t.bytes = v.size() * sizeof(float);
  CHECK(stacked_experts(t, n_ff, hidden, n_expert).size() == 4);
  CHECK_THROWS_WITH(stacked_experts(t, n_ff, hidden, n_expert + 1),
                    Catch::Contains("blk.3.ffn_gate_exps.weight"));
  t.bytes -= 4;
  CHECK_THROWS_WITH(stacked_experts(t, n_ff, hidden, n_expert), Catch::Contains("bytes"));
}
