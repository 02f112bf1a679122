// The CPU backend's recurrent operations (conv1d, the Mamba2 scan, the gated delta rule, the gated
// norm) against double-precision references written from their definitions (tolerance 1e-4
// relative), and their promise: a prompt cut into any chunks, or run beside other streams, gives
// the same bits.
#include <tf/backend/cpu.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace be_ns = tf::backend;
using buffer = be_ns::cpu::buffer;

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

buffer rows_of(std::vector<float> const& all, std::int64_t cols, std::int64_t first,
               std::int64_t n) {
  buffer b;
  b.cols = cols;
  b.rows = n;
  b.data.assign(all.begin() + first * cols, all.begin() + (first + n) * cols);
  return b;
}

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
double softplus(double x) {
  return x > 20.0 ? x : std::log1p(std::exp(x));
}

// A backend with one state layer of `floats` and `slots` slots, and the step of some rows.
struct rig {
  be_ns::cpu be{be_ns::cpu_options{2}};
  be_ns::cpu::kv_store kv;
  be_ns::cpu::state_store states;
  std::vector<std::int32_t> tokens = std::vector<std::int32_t>(4096, 0);
  std::vector<std::int32_t> pages{0};

  rig(std::int64_t floats, int slots)
      : kv(be.make_kv_store({1, 4096, tf::kv_dtype::f32, slots}, {0, 1, 1})),
        states(be.make_state_store(slots, {1, floats})) {}

  // The step of rows (start, count, slot).
  be_ns::cpu::step const& step(std::vector<std::array<std::int32_t, 3>> const& rows) {
    rows_.clear();
    for (auto const& [start, n, slot] : rows)
      rows_.push_back(
          {std::span(tokens).first(static_cast<std::size_t>(n)), start, pages, false, slot});
    return be.begin(rows_, kv, 1);
  }

 private:
  std::vector<tf::batch_row> rows_;
};

// Runs op(step, x chunk) over `t` tokens in chunks of `chunk` in slot 0 and gathers the outputs.
std::vector<float> chunked(rig& r, std::int64_t t, std::int64_t chunk,
                           std::function<std::vector<float>(be_ns::cpu::step const&, std::int64_t,
                                                            std::int64_t)> const& op) {
  std::vector<float> out;
  for (std::int64_t i = 0; i < t; i += chunk) {
    auto const n = std::min(chunk, t - i);
    auto const& s = r.step({{static_cast<std::int32_t>(i), static_cast<std::int32_t>(n), 0}});
    auto y = op(s, i, n);
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

}  // namespace

TEST_CASE("conv1d matches its definition and keeps its window across chunks") {
  std::int64_t const c = 6, k = 4, t = 23;
  auto const x = random_values(static_cast<std::size_t>(t * c), 1, 1.0f);
  auto const w = random_values(static_cast<std::size_t>(c * k), 2, 0.5f);
  auto const bias = random_values(static_cast<std::size_t>(c), 3, 0.5f);
  rig r((k - 1) * c + 5, 3);
  auto op = [&](be_ns::cpu::step const& s, std::int64_t first, std::int64_t n) {
    auto b = rows_of(x, c, first, n);
    r.be.conv1d(s, r.states, 0, 5, b, w, &bias, true);
    return b.data;
  };
  auto const whole = chunked(r, t, t, op);
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t ch = 0; ch < c; ++ch) {
      double acc = bias[static_cast<std::size_t>(ch)];
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t const src = i - (k - 1) + j;
        if (src >= 0)
          acc += double(w[static_cast<std::size_t>(ch * k + j)]) *
                 x[static_cast<std::size_t>(src * c + ch)];
      }
      CHECK(whole[static_cast<std::size_t>(i * c + ch)] ==
            Approx(silu(acc)).epsilon(1e-4).margin(1e-6));
    }
  CHECK(chunked(r, t, 1, op) == whole);
  CHECK(chunked(r, t, 7, op) == whole);
  // Bad shapes are refused, not read past.
  buffer b = rows_of(x, c, 0, 2);
  auto const& s = r.step({{0, 2, 0}});
  std::vector<float> const short_w(5);
  CHECK_THROWS_AS(r.be.conv1d(s, r.states, 0, 0, b, short_w, nullptr, false), tf::error);
  CHECK_THROWS_AS(r.be.conv1d(s, r.states, 0, 6, b, w, nullptr, false), tf::error);
}

TEST_CASE("the Mamba2 scan matches its definition, chunked or beside another stream") {
  be_ns::ssm_params const p{4, 3, 2, 5, 0.0f, 3.4e38f};
  std::int64_t const nh = p.heads, hd = p.head_dim, ng = p.groups, ds = p.state_size, t = 19;
  std::int64_t const cols = nh * hd + 2 * ng * ds;
  auto const xbc = random_values(static_cast<std::size_t>(t * cols), 4, 1.0f);
  auto const dt = random_values(static_cast<std::size_t>(t * nh), 5, 1.0f);
  auto const dt_bias = random_values(static_cast<std::size_t>(nh), 6, 0.5f);
  std::vector<float> a{-1.0f, -2.0f, -0.5f, -3.0f}, d{1.0f, 0.5f, -0.25f, 2.0f};
  rig r(nh * hd * ds, 3);
  auto op = [&](be_ns::cpu::step const& s, std::int64_t first, std::int64_t n) {
    auto xb = rows_of(xbc, cols, first, n);
    auto db = rows_of(dt, nh, first, n);
    buffer y;
    r.be.ssm_scan(s, r.states, 0, 0, xb, db, dt_bias, a, d, p, y);
    return y.data;
  };
  auto const whole = chunked(r, t, t, op);
  std::vector<double> h(static_cast<std::size_t>(nh * hd * ds), 0.0);
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t head = 0; head < nh; ++head) {
      std::int64_t const g = head / (nh / ng);
      double const step = softplus(dt[static_cast<std::size_t>(i * nh + head)] +
                                   double(dt_bias[static_cast<std::size_t>(head)]));
      double const decay = std::exp(step * a[static_cast<std::size_t>(head)]);
      for (std::int64_t e = 0; e < hd; ++e) {
        double const xv = xbc[static_cast<std::size_t>(i * cols + head * hd + e)];
        double y = 0.0;
        for (std::int64_t n = 0; n < ds; ++n) {
          double const bn = xbc[static_cast<std::size_t>(i * cols + nh * hd + g * ds + n)];
          double const cn =
              xbc[static_cast<std::size_t>(i * cols + nh * hd + ng * ds + g * ds + n)];
          double& hv = h[static_cast<std::size_t>((head * hd + e) * ds + n)];
          hv = hv * decay + step * xv * bn;
          y += hv * cn;
        }
        y += d[static_cast<std::size_t>(head)] * xv;
        CHECK(whole[static_cast<std::size_t>(i * nh * hd + head * hd + e)] ==
              Approx(y).epsilon(1e-4).margin(1e-5));
      }
    }
  CHECK(chunked(r, t, 1, op) == whole);
  CHECK(chunked(r, t, 7, op) == whole);
  // Beside another stream in one step: each row keeps to its slot.
  std::int64_t const t2 = 11;
  auto const& s =
      r.step({{0, static_cast<std::int32_t>(t2), 2}, {0, static_cast<std::int32_t>(t), 1}});
  buffer xb, db, y;
  xb.cols = cols;
  xb.rows = t2 + t;
  xb.data.assign(xbc.begin(), xbc.begin() + t2 * cols);
  xb.data.insert(xb.data.end(), xbc.begin(), xbc.end());
  db.cols = nh;
  db.rows = t2 + t;
  db.data.assign(dt.begin(), dt.begin() + t2 * nh);
  db.data.insert(db.data.end(), dt.begin(), dt.end());
  r.be.ssm_scan(s, r.states, 0, 0, xb, db, dt_bias, a, d, p, y);
  CHECK(std::vector<float>(y.data.begin() + t2 * nh * hd, y.data.end()) == whole);
}

TEST_CASE("the gated delta rule matches its definition in HF and tiled head order") {
  for (bool tiled : {false, true}) {
    INFO("tiled " << tiled);
    be_ns::delta_params const p{2, 4, 5, 3, tiled, 1e-6f};
    std::int64_t const nk = p.k_heads, nv = p.v_heads, dk = p.k_dim, dv = p.v_dim, t = 17;
    std::int64_t const cols = 2 * nk * dk + nv * dv;
    auto const qkv = random_values(static_cast<std::size_t>(t * cols), 7, 1.0f);
    auto const b = random_values(static_cast<std::size_t>(t * nv), 8, 1.0f);
    auto const a = random_values(static_cast<std::size_t>(t * nv), 9, 1.0f);
    auto const dt_bias = random_values(static_cast<std::size_t>(nv), 10, 0.5f);
    std::vector<float> const coef{-0.5f, -1.0f, -2.0f, -0.1f};
    rig r(nv * dk * dv + 3, 2);
    auto op = [&](be_ns::cpu::step const& s, std::int64_t first, std::int64_t n) {
      auto qb = rows_of(qkv, cols, first, n);
      auto bb = rows_of(b, nv, first, n);
      auto ab = rows_of(a, nv, first, n);
      buffer out;
      r.be.gated_delta(s, r.states, 0, 3, qb, bb, ab, dt_bias, coef, p, out);
      return out.data;
    };
    auto const whole = chunked(r, t, t, op);
    std::vector<double> S(static_cast<std::size_t>(nv * dk * dv), 0.0);
    for (std::int64_t i = 0; i < t; ++i)
      for (std::int64_t j = 0; j < nv; ++j) {
        std::int64_t const kh = tiled ? j % nk : j / (nv / nk);
        double const* unused = nullptr;
        (void)unused;
        std::vector<double> q(static_cast<std::size_t>(dk)), k(static_cast<std::size_t>(dk));
        double sq = 0, sk = 0;
        for (std::int64_t e = 0; e < dk; ++e) {
          q[static_cast<std::size_t>(e)] = qkv[static_cast<std::size_t>(i * cols + kh * dk + e)];
          k[static_cast<std::size_t>(e)] =
              qkv[static_cast<std::size_t>(i * cols + nk * dk + kh * dk + e)];
          sq += q[static_cast<std::size_t>(e)] * q[static_cast<std::size_t>(e)];
          sk += k[static_cast<std::size_t>(e)] * k[static_cast<std::size_t>(e)];
        }
        for (std::int64_t e = 0; e < dk; ++e) {
          q[static_cast<std::size_t>(e)] *= 1.0 / std::sqrt(sq + 1e-6) / std::sqrt(double(dk));
          k[static_cast<std::size_t>(e)] *= 1.0 / std::sqrt(sk + 1e-6);
        }
        double const beta =
            1.0 / (1.0 + std::exp(-double(b[static_cast<std::size_t>(i * nv + j)])));
        double const decay = std::exp(coef[static_cast<std::size_t>(j)] *
                                      softplus(a[static_cast<std::size_t>(i * nv + j)] +
                                               double(dt_bias[static_cast<std::size_t>(j)])));
        double* s = S.data() + j * dk * dv;
        for (std::int64_t v = 0; v < dv; ++v) {
          double kv = 0;
          for (std::int64_t e = 0; e < dk; ++e)
            kv += (s[e * dv + v] *= decay) * k[static_cast<std::size_t>(e)];
          double const delta =
              beta * (qkv[static_cast<std::size_t>(i * cols + 2 * nk * dk + j * dv + v)] - kv);
          double o = 0;
          for (std::int64_t e = 0; e < dk; ++e) {
            s[e * dv + v] += k[static_cast<std::size_t>(e)] * delta;
            o += s[e * dv + v] * q[static_cast<std::size_t>(e)];
          }
          CHECK(whole[static_cast<std::size_t>(i * nv * dv + j * dv + v)] ==
                Approx(o).epsilon(1e-4).margin(1e-5));
        }
      }
    CHECK(chunked(r, t, 1, op) == whole);
    CHECK(chunked(r, t, 7, op) == whole);
  }
}

TEST_CASE("the gated RMSNorm normalises before or after the gate, per group") {
  be_ns::cpu be;
  std::int64_t const cols = 8, group = 4;
  auto const y0 = random_values(16, 11, 1.0f), z0 = random_values(16, 12, 1.0f);
  auto const w_all = random_values(8, 13, 1.0f), w_group = random_values(4, 14, 1.0f);
  for (bool before : {false, true}) {
    for (auto const* w : {&w_all, &w_group}) {
      buffer y = rows_of(y0, cols, 0, 2), z = rows_of(z0, cols, 0, 2);
      be.gated_rmsnorm(y, z, *w, static_cast<int>(group), 1e-6f, before);
      for (std::int64_t t = 0; t < 2; ++t)
        for (std::int64_t g = 0; g < cols; g += group) {
          std::vector<double> v(static_cast<std::size_t>(group));
          double ss = 0;
          for (std::int64_t i = 0; i < group; ++i) {
            double x = y0[static_cast<std::size_t>(t * cols + g + i)];
            if (!before) x *= silu(z0[static_cast<std::size_t>(t * cols + g + i)]);
            v[static_cast<std::size_t>(i)] = x;
            ss += x * x;
          }
          for (std::int64_t i = 0; i < group; ++i) {
            auto const wi = w->size() == static_cast<std::size_t>(cols) ? g + i : i;
            double want = v[static_cast<std::size_t>(i)] / std::sqrt(ss / double(group) + 1e-6) *
                          (*w)[static_cast<std::size_t>(wi)];
            if (before) want *= silu(z0[static_cast<std::size_t>(t * cols + g + i)]);
            CHECK(y.data[static_cast<std::size_t>(t * cols + g + i)] ==
                  Approx(want).epsilon(1e-4).margin(1e-6));
          }
        }
    }
  }
  buffer y = rows_of(y0, cols, 0, 2), z = rows_of(z0, cols, 0, 2);
  CHECK_THROWS_AS(be.gated_rmsnorm(y, z, w_all, 3, 1e-6f, true), tf::error);
}

TEST_CASE("columns slices plain and per-head interleaved columns; sigmoid_gate scales") {
  be_ns::cpu be;
  buffer src;
  src.rows = 2;
  src.cols = 8;
  for (int i = 0; i < 16; ++i) src.data.push_back(static_cast<float>(i));
  buffer dst;
  be.columns(src, dst, 2, 3, 0);
  CHECK(dst.cols == 3);
  CHECK(dst.data == std::vector<float>{2, 3, 4, 10, 11, 12});
  be.columns(src, dst, 2, 2, 4);  // the second half of each 4-wide head
  CHECK(dst.cols == 4);
  CHECK(dst.data == std::vector<float>{2, 3, 6, 7, 10, 11, 14, 15});
  CHECK_THROWS_AS(be.columns(src, dst, 3, 2, 4), tf::error);
  buffer gate = src;
  for (auto& g : gate.data) g = 0.0f;
  be.sigmoid_gate(src, gate);
  CHECK(src.data[6] == 3.0f);
}
