// Mixture of experts: binding experts from stacked tensors (families/common/experts.hpp), and the
// CPU backend's routing and expert runs (include/tf/backend/cpu/moe.hpp).
#include <families/common/experts.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <tf/backend/cpu/moe.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_view.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

namespace cpu = tf::backend::cpu_parts;
using tf::backend::routing_kind;
using tf::backend::routing_params;
using tf::families::stacked_experts;
using tf::kernels::cpu::thread_pool;

namespace {

constexpr std::int64_t hidden = 12, n_ff = 8, n_expert = 4;

std::vector<float> random_values(std::size_t n, unsigned seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// An F32 matrix [rows, cols] over `v`.
cpu::matrix f32_matrix(std::vector<float> const& v, std::int64_t rows, std::int64_t cols) {
  return tf::backend::host_matrix{tf::model::tensor_type::f32, rows, cols,
                                  reinterpret_cast<std::byte const*>(v.data()),
                                  static_cast<std::uint64_t>(cols) * sizeof(float)};
}

// Experts stored as one stacked F32 tensor per projection, as GGUF's ffn_*_exps, plus a router
// [n_expert, hidden] and a shared expert.
struct stacked {
  std::vector<float> gate, up, down, router, sh_gate, sh_up, sh_down;
  std::vector<cpu::expert> experts;
  cpu::expert shared;

  explicit stacked(unsigned seed) {
    gate = random_values(n_expert * n_ff * hidden, seed, 0.5f);
    up = random_values(n_expert * n_ff * hidden, seed + 1, 0.5f);
    down = random_values(n_expert * hidden * n_ff, seed + 2, 0.5f);
    router = random_values(n_expert * hidden, seed + 3, 1.0f);
    sh_gate = random_values(n_ff * hidden, seed + 4, 0.5f);
    sh_up = random_values(n_ff * hidden, seed + 5, 0.5f);
    sh_down = random_values(hidden * n_ff, seed + 6, 0.5f);
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
    shared = {f32_matrix(sh_gate, n_ff, hidden), f32_matrix(sh_up, n_ff, hidden),
              f32_matrix(sh_down, hidden, n_ff)};
  }

  cpu::matrix router_matrix() const { return f32_matrix(router, n_expert, hidden); }

  // The SwiGLU of one expert's arrays (row-major [n_ff, hidden] gate and up, [hidden, n_ff]
  // down) on one row, in double.
  static std::vector<double> swiglu(float const* g, float const* u, float const* d,
                                    float const* x) {
    std::vector<double> h(static_cast<std::size_t>(n_ff)), y(static_cast<std::size_t>(hidden));
    for (std::int64_t f = 0; f < n_ff; ++f) {
      double gs = 0, us = 0;
      for (std::int64_t c = 0; c < hidden; ++c) {
        gs += double(g[f * hidden + c]) * x[c];
        us += double(u[f * hidden + c]) * x[c];
      }
      h[static_cast<std::size_t>(f)] = gs / (1.0 + std::exp(-gs)) * us;
    }
    for (std::int64_t r = 0; r < hidden; ++r)
      for (std::int64_t f = 0; f < n_ff; ++f)
        y[static_cast<std::size_t>(r)] += double(d[r * n_ff + f]) * h[static_cast<std::size_t>(f)];
    return y;
  }

  // Expert e straight from the stacked arrays.
  std::vector<double> reference(std::int64_t e, float const* x) const {
    return swiglu(gate.data() + e * n_ff * hidden, up.data() + e * n_ff * hidden,
                  down.data() + e * hidden * n_ff, x);
  }
  std::vector<double> shared_reference(float const* x) const {
    return swiglu(sh_gate.data(), sh_up.data(), sh_down.data(), x);
  }
};

std::vector<float> random_rows(std::int64_t n, unsigned seed) {
  return random_values(static_cast<std::size_t>(n * hidden), seed, 1.0f);
}

// SwiGLU's gate, as the CPU backend passes it to run_moe.
void silu_glu(float* g, float const* u, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) g[i] = cpu::silu(g[i]) * u[i];
}

// The ungated experts' activation: unused by these gated experts.
void no_act(float*, std::int64_t) {
  FAIL("an ungated activation for gated experts");
}

routing_params softmax_top2() {
  return {routing_kind::softmax_top_k, static_cast<int>(n_expert), 2, true, 1.0f};
}

}  // namespace

TEST_CASE("top_k picks the highest scores, ties to the lower expert") {
  float const scores[] = {0.1f, 0.7f, 0.3f, 0.7f, 0.3f};
  std::int32_t p[5];
  tf::backend::top_k(scores, nullptr, 5, 3, p);
  CHECK(p[0] == 1);
  CHECK(p[1] == 3);
  CHECK(p[2] == 2);
  char const allowed[] = {1, 0, 1, 1, 1};  // expert 1 out of reach
  tf::backend::top_k(scores, allowed, 5, 3, p);
  CHECK(p[0] == 3);
  CHECK(p[1] == 2);
  CHECK(p[2] == 4);
  CHECK_THROWS_AS(tf::backend::top_k(scores, nullptr, 5, 6, p), tf::error);
  CHECK_THROWS_AS(tf::backend::top_k(scores, allowed, 5, 5, p), tf::error);
}

TEST_CASE("softmax top-k routing weighs the picks by their probabilities") {
  float const logits[] = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f};
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  routing_params r{routing_kind::softmax_top_k, 5, 3, false, 1.0f};
  std::int32_t pick[3];
  float weight[3];
  tf::backend::route(r, logits, nullptr, pick, weight);
  CHECK(pick[0] == 1);  // ties go to the lower expert
  CHECK(pick[1] == 3);
  CHECK(pick[2] == 2);
  CHECK(weight[0] == Approx(std::exp(2.0) / z));
  CHECK(weight[2] == Approx(std::exp(1.0) / z));
  r.normalize = true;
  r.scale = 2.0f;
  tf::backend::route(r, logits, nullptr, pick, weight);
  CHECK(weight[0] + weight[1] + weight[2] == Approx(2.0f));
  CHECK(weight[0] == Approx(2.0 * std::exp(2.0) / (2 * std::exp(2.0) + std::exp(1.0))));
  r.k = 6;
  CHECK_THROWS_AS(tf::backend::route(r, logits, nullptr, pick, weight), tf::error);
}

TEST_CASE("sigmoid routing picks by score plus bias in the best groups, weighs by the score") {
  // Four groups of two; the correction bias moves expert 6 ahead, not its weight.
  float const logits[] = {3.0f, 2.5f, 0.0f, -1.0f, 1.0f, 1.0f, 0.5f, -2.0f};
  float const bias[] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f};
  auto sig = [](float l) { return 1.0f / (1.0f + std::exp(-l)); };
  routing_params r{routing_kind::sigmoid_groups, 8, 2, false, 1.0f, 1, 1};
  std::int32_t pick[2];
  float weight[2];
  tf::backend::route(r, logits, bias, pick, weight);
  CHECK(pick[0] == 6);
  CHECK(pick[1] == 0);
  CHECK(weight[0] == sig(0.5f));
  CHECK(weight[1] == sig(3.0f));
  // With groups, only the best top_groups (by their two best biased scores) compete.
  r.groups = 4;
  r.top_groups = 1;
  tf::backend::route(r, logits, bias, pick, weight);
  CHECK(pick[0] == 0);
  CHECK(pick[1] == 1);
  r.top_groups = 2;
  r.normalize = true;
  r.scale = 2.5f;
  tf::backend::route(r, logits, bias, pick, weight);
  CHECK(pick[0] == 6);
  CHECK(pick[1] == 0);
  CHECK(weight[0] + weight[1] == Approx(2.5f));
  CHECK(weight[0] == Approx(2.5f * sig(0.5f) / (sig(0.5f) + sig(3.0f))));
}

TEST_CASE("run_moe matches the routed per-expert SwiGLU sum, plus the shared expert") {
  stacked w(7);
  thread_pool pool(2);
  std::int64_t const rows = 3;
  auto x = random_rows(rows, 11);
  auto const r = softmax_top2();
  auto const router = w.router_matrix();
  // The picks: the router's logits routed as run_moe routes them.
  std::vector<float> logits(static_cast<std::size_t>(rows * n_expert));
  cpu::matmul(pool, router, x.data(), logits.data(), rows);
  std::vector<std::int32_t> pick(static_cast<std::size_t>(rows * 2));
  std::vector<float> weight(pick.size());
  for (std::int64_t t = 0; t < rows; ++t)
    tf::backend::route(r, logits.data() + t * n_expert, nullptr, pick.data() + t * 2,
                       weight.data() + t * 2);
  for (bool with_shared : {false, true}) {
    INFO("shared expert " << with_shared);
    std::vector<float> out(static_cast<std::size_t>(rows * hidden), 1.0f);  // replaced
    cpu::moe_scratch m;
    cpu::run_moe(pool, r, router, nullptr, w.experts, with_shared ? &w.shared : nullptr, nullptr,
                 nullptr, nullptr, x.data(), rows, out.data(), silu_glu, no_act, m);
    CHECK(m.pick == pick);
    for (std::int64_t t = 0; t < rows; ++t) {
      std::vector<double> want(static_cast<std::size_t>(hidden), 0.0);
      if (with_shared) want = w.shared_reference(x.data() + t * hidden);
      for (int s = 0; s < 2; ++s) {
        auto const i = static_cast<std::size_t>(t * 2 + s);
        auto y = w.reference(pick[i], x.data() + t * hidden);
        for (std::int64_t c = 0; c < hidden; ++c)
          want[static_cast<std::size_t>(c)] += weight[i] * y[static_cast<std::size_t>(c)];
      }
      for (std::int64_t c = 0; c < hidden; ++c)
        CHECK(out[static_cast<std::size_t>(t * hidden + c)] ==
              Approx(want[static_cast<std::size_t>(c)]).margin(1e-5));
    }
  }
}

TEST_CASE("run_moe gives a row the same bits alone or in a batch, on 1 or 2 threads") {
  stacked w(3);
  thread_pool one(1), two(2);
  std::int64_t const rows = 5;
  auto x = random_rows(rows, 5);
  auto const r = softmax_top2();
  auto const router = w.router_matrix();
  cpu::moe_scratch m;
  std::vector<float> batch(static_cast<std::size_t>(rows * hidden), 0.0f);
  cpu::run_moe(two, r, router, nullptr, w.experts, &w.shared, nullptr, nullptr, nullptr, x.data(),
               rows, batch.data(), silu_glu, no_act, m);
  std::set<std::int32_t> used(m.pick.begin(), m.pick.end());
  CHECK(used.size() > 2);  // the rows do not all pick the same experts
  for (std::int64_t t = 0; t < rows; ++t) {
    std::vector<float> alone(static_cast<std::size_t>(hidden), 0.0f);
    cpu::run_moe(one, r, router, nullptr, w.experts, &w.shared, nullptr, nullptr, nullptr,
                 x.data() + t * hidden, 1, alone.data(), silu_glu, no_act, m);
    CHECK(std::memcmp(alone.data(), batch.data() + t * hidden, alone.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("run_moe never reads an expert nobody picked") {
  stacked w(9);
  // Poison expert 3: a read of it would put NaN into the output. Its correction bias keeps it
  // out of every top 2.
  std::vector<float> nan(static_cast<std::size_t>(n_ff * hidden),
                         std::numeric_limits<float>::quiet_NaN());
  w.experts[3].gate.data = reinterpret_cast<std::byte const*>(nan.data());
  w.experts[3].up.data = reinterpret_cast<std::byte const*>(nan.data());
  w.experts[3].down.data = reinterpret_cast<std::byte const*>(nan.data());
  float const bias[] = {0.0f, 0.0f, 0.0f, -10.0f};
  thread_pool pool(1);
  auto x = random_rows(2, 1);
  routing_params r{routing_kind::sigmoid_groups, static_cast<int>(n_expert), 2, true, 1.0f, 1, 1};
  std::vector<float> out(static_cast<std::size_t>(2 * hidden), 0.0f);
  cpu::moe_scratch m;
  cpu::run_moe(pool, r, w.router_matrix(), bias, w.experts, nullptr, nullptr, nullptr, nullptr,
               x.data(), 2, out.data(), silu_glu, no_act, m);
  for (float v : out) CHECK(std::isfinite(v));
  r.experts = 5;  // a routing over more experts than the layer has
  CHECK_THROWS_AS(cpu::run_moe(pool, r, w.router_matrix(), bias, w.experts, nullptr, nullptr,
                               nullptr, nullptr, x.data(), 2, out.data(), silu_glu, no_act, m),
                  tf::error);
}

TEST_CASE("ungated relu² experts in a latent width, a gated shared expert (Nemotron 3, Qwen3.5)") {
  constexpr std::int64_t latent = 6;
  auto const ups = random_values(n_expert * n_ff * latent, 21, 0.5f);
  auto const downs = random_values(n_expert * latent * n_ff, 22, 0.5f);
  auto const fc1 = random_values(latent * hidden, 23, 0.5f);
  auto const fc2 = random_values(hidden * latent, 24, 0.5f);
  auto const sh_up = random_values(n_ff * hidden, 25, 0.5f);
  auto const sh_down = random_values(hidden * n_ff, 26, 0.5f);
  auto const sh_gate = random_values(hidden, 27, 1.0f);
  auto const router = random_values(n_expert * hidden, 28, 1.0f);
  std::vector<cpu::expert> experts;
  for (std::int64_t e = 0; e < n_expert; ++e) {
    std::vector<float> const& u = ups;
    experts.push_back(
        {{},
         tf::backend::host_matrix{tf::model::tensor_type::f32, n_ff, latent,
                                  reinterpret_cast<std::byte const*>(u.data() + e * n_ff * latent),
                                  latent * sizeof(float)},
         tf::backend::host_matrix{
             tf::model::tensor_type::f32, latent, n_ff,
             reinterpret_cast<std::byte const*>(downs.data() + e * latent * n_ff),
             n_ff * sizeof(float)}});
  }
  cpu::expert const shared{{}, f32_matrix(sh_up, n_ff, hidden), f32_matrix(sh_down, hidden, n_ff)};
  auto const down = f32_matrix(fc1, latent, hidden), up = f32_matrix(fc2, hidden, latent);
  auto const gate = f32_matrix(sh_gate, 1, hidden);
  auto relu2 = [](float* v, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) v[i] = v[i] > 0 ? v[i] * v[i] : 0.0f;
  };
  auto mlp = [](float const* u, float const* d, std::int64_t in, std::int64_t out,
                std::vector<double> const& x) {  // down(relu²(up x)) in double
    std::vector<double> h(static_cast<std::size_t>(n_ff)), y(static_cast<std::size_t>(out));
    for (std::int64_t f = 0; f < n_ff; ++f) {
      double a = 0;
      for (std::int64_t c = 0; c < in; ++c)
        a += double(u[f * in + c]) * x[static_cast<std::size_t>(c)];
      h[static_cast<std::size_t>(f)] = a > 0 ? a * a : 0.0;
    }
    for (std::int64_t r = 0; r < out; ++r)
      for (std::int64_t f = 0; f < n_ff; ++f)
        y[static_cast<std::size_t>(r)] += double(d[r * n_ff + f]) * h[static_cast<std::size_t>(f)];
    return y;
  };
  thread_pool pool(2);
  std::int64_t const rows = 3;
  auto const x = random_rows(rows, 29);
  routing_params r{routing_kind::sigmoid_groups, static_cast<int>(n_expert), 2, true, 2.5f, 1, 1};
  r.act = tf::backend::activation::relu2;
  std::vector<float> out(static_cast<std::size_t>(rows * hidden));
  cpu::moe_scratch m;
  auto const router_m = f32_matrix(router, n_expert, hidden);
  cpu::run_moe(pool, r, router_m, nullptr, experts, &shared, &gate, &down, &up, x.data(), rows,
               out.data(), silu_glu, relu2, m);
  for (std::int64_t t = 0; t < rows; ++t) {
    std::vector<double> xt(x.begin() + t * hidden, x.begin() + (t + 1) * hidden), lx(latent);
    for (std::int64_t l = 0; l < latent; ++l)
      for (std::int64_t c = 0; c < hidden; ++c)
        lx[static_cast<std::size_t>(l)] +=
            double(fc1[static_cast<std::size_t>(l * hidden + c)]) * xt[static_cast<std::size_t>(c)];
    std::vector<double> sum(latent, 0.0);
    for (int k = 0; k < 2; ++k) {
      auto const i = static_cast<std::size_t>(t * 2 + k);
      auto const e = m.pick[i];
      auto y =
          mlp(ups.data() + e * n_ff * latent, downs.data() + e * latent * n_ff, latent, latent, lx);
      for (std::int64_t l = 0; l < latent; ++l)
        sum[static_cast<std::size_t>(l)] += m.weight[i] * y[static_cast<std::size_t>(l)];
    }
    auto const sh = mlp(sh_up.data(), sh_down.data(), hidden, hidden, xt);
    double g = 0;
    for (std::int64_t c = 0; c < hidden; ++c)
      g += double(sh_gate[static_cast<std::size_t>(c)]) * xt[static_cast<std::size_t>(c)];
    g = 1.0 / (1.0 + std::exp(-g));
    for (std::int64_t c = 0; c < hidden; ++c) {
      double want = g * sh[static_cast<std::size_t>(c)];
      for (std::int64_t l = 0; l < latent; ++l)
        want += double(fc2[static_cast<std::size_t>(c * latent + l)]) *
                sum[static_cast<std::size_t>(l)];
      CHECK(out[static_cast<std::size_t>(t * hidden + c)] ==
            Approx(want).epsilon(1e-4).margin(1e-5));
    }
  }
  CHECK(m.weight[0] + m.weight[1] == Approx(2.5f));  // renormalised, times the scale
  CHECK_THROWS_AS(cpu::run_moe(pool, r, router_m, nullptr, experts, &shared, &gate, &down, nullptr,
                               x.data(), rows, out.data(), silu_glu, relu2, m),
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

TEST_CASE("row_slice splits a fused gate_up expert into its gate and up rows") {
  auto v = random_values(static_cast<std::size_t>(n_expert * 2 * n_ff * hidden), 2, 1.0f);
  tf::model::tensor_view t;
  t.name = "model.layers.1.mlp.experts.gate_up_proj";
  t.type = tf::model::tensor_type::f32;
  t.dims = {hidden, 2 * n_ff, n_expert};
  t.data = reinterpret_cast<std::byte const*>(v.data());
  t.bytes = v.size() * sizeof(float);
  auto const both = stacked_experts(t, 2 * n_ff, hidden, n_expert);
  auto const g = tf::families::row_slice(both[2], 0, n_ff);
  auto const u = tf::families::row_slice(both[2], n_ff, n_ff);
  CHECK(g.rows == n_ff);
  CHECK(u.cols == hidden);
  std::vector<float> row(static_cast<std::size_t>(hidden));
  cpu::matrix(u).dequantize_row(1, row.data());
  CHECK(row[0] == v[static_cast<std::size_t>((2 * 2 * n_ff + n_ff + 1) * hidden)]);
  cpu::matrix(g).dequantize_row(0, row.data());
  CHECK(row[5] == v[static_cast<std::size_t>(2 * 2 * n_ff * hidden + 5)]);
}
