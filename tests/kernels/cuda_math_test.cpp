// The CUDA kernels' arithmetic (kernels/cuda/*_math.hpp) run on the CPU: the host emulations of
// the kernels' orders against the CPU backend, and the attention's tiled online softmax against a
// double-precision softmax. The device runs the same functions with CUDA's exp and tanh (a couple
// of ulp from the host's), so these tolerances bound the order, not the device's libm.
#include <kernels/cuda/attention_math.hpp>
#include <kernels/cuda/norm_math.hpp>
#include <kernels/portable/elementwise_math.hpp>
#include <tf/backend/cpu.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace em = tf::kernels::portable::elementwise_math;
namespace nm = tf::kernels::cuda::norm_math;
namespace am = tf::kernels::cuda::attention_math;
using cpu = tf::backend::cpu;
using buffer = cpu::buffer;

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed, float scale, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

buffer buffer_of(std::vector<float> data, std::int64_t cols) {
  auto const rows = static_cast<std::int64_t>(data.size()) / cols;
  return {std::move(data), rows, cols};
}

// The largest |got - want| / tol(i) over the elements: within tolerance when <= 1.
double worst(std::vector<float> const& got, std::vector<float> const& want,
             std::function<double(std::size_t)> const& tol) {
  REQUIRE(got.size() == want.size());
  double w = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double const d = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    w = std::max(w, d / tol(i));
    if (std::isnan(got[i]) != std::isnan(want[i])) w = std::numeric_limits<double>::infinity();
  }
  return w;
}

// Tolerance rel * |want[i]| (+ abs).
std::function<double(std::size_t)> relative(std::vector<float> const& want, double rel,
                                            double abs = 1e-30) {
  return [&want, rel, abs](std::size_t i) { return rel * std::abs(want[i]) + abs; };
}

float act(tf::backend::activation a, float x) {
  switch (a) {
    case tf::backend::activation::gelu_tanh:
      return em::gelu_tanh(x);
    case tf::backend::activation::silu:
      return em::silu(x);
    case tf::backend::activation::relu2:
      return em::relu2(x);
  }
  return x;
}

}  // namespace

TEST_CASE("activations, gated units, sigmoid gates and softcaps match the CPU backend's") {
  cpu be;
  cpu::step const s;  // an f32 cache's numerics
  auto const x = random_values(4096, 1, 3.0f);
  auto const u = random_values(4096, 2, 1.0f);
  using tf::backend::activation;
  for (auto a : {activation::gelu_tanh, activation::silu, activation::relu2}) {
    INFO("activation " << static_cast<int>(a));
    std::vector<float> want_act(x.size()), want_glu(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      want_act[i] = act(a, x[i]);
      want_glu[i] = act(a, x[i]) * u[i];
    }
    auto b = buffer_of(x, 64);
    be.activate(s, a, b);
    CHECK(worst(want_act, b.data, relative(b.data, 2e-6)) <= 1.0);

    // The CPU's f32 GeGLU takes gelu as x / (1 + e^(-2y)) with its own exp: apart from 2e-6,
    // the kernel's 1 + tanh(y) loses up to an ulp of 1 against 0.5 |x u|.
    auto g = buffer_of(x, 64);
    be.glu(s, a, g, buffer_of(u, 64));
    double const cancel = a == activation::gelu_tanh ? 1.2e-7 : 0.0;
    CHECK(worst(want_glu, g.data, [&](std::size_t i) {
            return 2e-6 * std::abs(g.data[i]) + cancel * std::abs(x[i] * u[i]) + 1e-30;
          }) <= 1.0);

    // The merged gate|up: rows of [gate 32 | up 32].
    std::vector<float> gu(x.size() * 2);
    for (std::size_t r = 0; r < x.size() / 32; ++r)
      for (std::size_t c = 0; c < 32; ++c) {
        gu[r * 64 + c] = x[r * 32 + c];
        gu[r * 64 + 32 + c] = u[r * 32 + c];
      }
    buffer merged;
    be.glu_merged(s, a, buffer_of(gu, 64), merged);
    CHECK(worst(want_glu, merged.data, [&](std::size_t i) {
            return 2e-6 * std::abs(merged.data[i]) + cancel * std::abs(x[i] * u[i]) + 1e-30;
          }) <= 1.0);
  }

  auto gated = buffer_of(x, 64);
  be.sigmoid_gate(gated, buffer_of(u, 64));
  std::vector<float> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = x[i] * em::sigmoid(u[i]);
  CHECK(worst(want, gated.data, relative(gated.data, 2e-6)) <= 1.0);

  // The CPU's vectorized tanh is 1 - 2 / (e^(2y) + 1): near 0 it is good to an ulp of 1, times
  // the cap.
  float const cap = 30.0f;
  auto const logits = random_values(4096, 3, 40.0f);
  auto capped = logits;
  tf::kernels::cpu::vec_math::softcap(capped.data(), static_cast<std::int64_t>(capped.size()), cap);
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = em::softcap(logits[i], cap);
  CHECK(worst(want, capped, relative(capped, 2e-6, 2.4e-7 * cap)) <= 1.0);
}

TEST_CASE("a norm block's threads and fold") {
  CHECK(nm::threads_for(1) == 32);
  CHECK(nm::threads_for(32) == 32);
  CHECK(nm::threads_for(33) == 64);
  CHECK(nm::threads_for(128) == 128);
  CHECK(nm::threads_for(200) == 256);
  CHECK(nm::threads_for(5120) == 256);
  // The fold adds p[i + s] into p[i]: whole numbers give their exact total.
  double p[8] = {1, 2, 4, 8, 16, 32, 64, 128};
  CHECK(nm::fold(p, 8) == 255.0);
  CHECK(p[1] == 2 + 8 + 32 + 128);
  // A group no wider than its threads is each thread's one square, folded.
  std::vector<float> const x = {3.0f, 4.0f};
  CHECK(nm::inv_rms_of(x.data(), 2, 0.0f) == 1.0f / std::sqrt(12.5f));
}

TEST_CASE("RMSNorm in the norm kernel's order matches the CPU backend's") {
  cpu be;
  float const eps = 1e-6f;
  for (std::int64_t cols : {1, 7, 64, 100, 896, 4096, 5120}) {
    INFO("cols " << cols);
    auto const x = random_values(static_cast<std::size_t>(3 * cols), 4, 2.0f);
    auto const w = random_values(static_cast<std::size_t>(cols), 5, 0.3f, 1.0f);
    buffer out;
    be.rmsnorm(buffer_of(x, cols), w, out, eps);
    std::vector<float> want(x.size());
    nm::rmsnorm_rows(x.data(), w.data(), cols, want.data(), 3, cols, cols, eps);
    CHECK(worst(want, out.data, relative(out.data, 2e-6)) <= 1.0);
  }
  // Per head, with the head's weights shared, and with each group's own weights.
  std::int64_t const head_dim = 128, cols = 8 * head_dim;
  auto const x = random_values(static_cast<std::size_t>(5 * cols), 6, 1.5f);
  auto const w = random_values(static_cast<std::size_t>(cols), 7, 0.3f, 1.0f);
  auto heads = buffer_of(x, cols);
  std::vector<float> const w_head(w.begin(), w.begin() + head_dim);
  be.rmsnorm_heads(heads, w_head, static_cast<int>(head_dim), eps);
  std::vector<float> want(x.size());
  nm::rmsnorm_rows(x.data(), w_head.data(), head_dim, want.data(), 5, cols, head_dim, eps);
  CHECK(worst(want, heads.data, relative(heads.data, 2e-6)) <= 1.0);

  // Each group through the backend's rmsnorm with its slice of w.
  std::vector<float> cpu_groups(x.size());
  for (std::int64_t g0 = 0; g0 < cols; g0 += head_dim) {
    buffer part{{}, 5, head_dim}, normed;
    for (std::int64_t r = 0; r < 5; ++r)
      part.data.insert(part.data.end(), x.begin() + r * cols + g0,
                       x.begin() + r * cols + g0 + head_dim);
    be.rmsnorm(part, std::vector<float>(w.begin() + g0, w.begin() + g0 + head_dim), normed, eps);
    for (std::int64_t r = 0; r < 5; ++r)
      std::copy_n(normed.data.begin() + r * head_dim, head_dim, cpu_groups.begin() + r * cols + g0);
  }
  nm::rmsnorm_rows(x.data(), w.data(), cols, want.data(), 5, cols, head_dim, eps);
  CHECK(worst(want, cpu_groups, relative(cpu_groups, 2e-6)) <= 1.0);
}

TEST_CASE("the residual kernel's order matches the CPU backend's") {
  cpu be;
  float const eps = 1e-5f;
  std::int64_t const cols = 896, rows = 4;
  auto const x = random_values(static_cast<std::size_t>(rows * cols), 8, 1.0f);
  auto const o = random_values(static_cast<std::size_t>(rows * cols), 9, 3.0f);
  auto const post = random_values(static_cast<std::size_t>(cols), 10, 0.2f, 1.0f);
  auto const next = random_values(static_cast<std::size_t>(cols), 11, 0.2f, 1.0f);
  for (int mode = 0; mode < 4; ++mode) {
    INFO("post " << (mode & 1) << " next " << (mode >> 1));
    auto const* p = mode & 1 ? &post : nullptr;
    auto const* n = mode & 2 ? &next : nullptr;
    auto xb = buffer_of(x, cols), ob = buffer_of(o, cols);
    be.residual(xb, ob, p, n, eps);
    auto wx = x, wo = o;
    for (std::int64_t r = 0; r < rows; ++r)
      nm::residual_row(wx.data() + r * cols, wo.data() + r * cols, p ? p->data() : nullptr,
                       n ? n->data() : nullptr, cols, eps);
    CHECK(worst(wx, xb.data, relative(xb.data, 2e-6)) <= 1.0);
    CHECK(worst(wo, ob.data, relative(ob.data, 2e-6)) <= 1.0);
  }
}

TEST_CASE("the gated RMSNorm kernel's order matches the CPU backend's") {
  cpu be;
  float const eps = 1e-6f;
  std::int64_t const group = 64, cols = 4 * group, rows = 3;
  auto const y = random_values(static_cast<std::size_t>(rows * cols), 12, 1.0f);
  auto const z = random_values(static_cast<std::size_t>(rows * cols), 13, 2.0f);
  auto const w = random_values(static_cast<std::size_t>(cols), 14, 0.2f, 1.0f);
  for (std::int64_t w_size : {group, cols})
    for (bool before : {true, false}) {
      INFO("weights " << w_size << " norm before gate " << before);
      std::vector<float> const ws(w.begin(), w.begin() + w_size);
      auto yb = buffer_of(y, cols);
      be.gated_rmsnorm(yb, buffer_of(z, cols), ws, static_cast<int>(group), eps, before);
      auto want = y;
      for (std::int64_t r = 0; r < rows; ++r)
        nm::gated_rmsnorm_row(want.data() + r * cols, z.data() + r * cols, ws.data(), w_size, cols,
                              group, eps, before);
      CHECK(worst(want, yb.data, relative(yb.data, 2e-6)) <= 1.0);
    }
}

TEST_CASE("the RoPE rotations match the CPU backend's") {
  cpu be;
  auto kv = be.make_kv_store({1, 4096, tf::kv_dtype::f32, 0}, {1, 1, 1});
  std::vector<std::int32_t> const tokens(8, 0), pages{0};
  std::vector<tf::batch_row> const rows = {{std::span(tokens).first(5), 3, pages},
                                           {std::span(tokens).first(3), 1000, pages}};
  auto const& s = be.begin(rows, kv, 1);
  int const head_dim = 64, heads = 4;
  auto const x = random_values(static_cast<std::size_t>(8 * heads * head_dim), 15, 1.0f);
  for (auto kind : {tf::backend::rope_kind::neox, tf::backend::rope_kind::interleaved})
    for (int dims : {64, 32}) {
      INFO("kind " << static_cast<int>(kind) << " dims " << dims);
      tf::backend::rope_params const p{kind, dims, 10000.0f, 1.0f};
      auto xb = buffer_of(x, heads * head_dim);
      be.rope(s, xb, head_dim, p);
      auto const& cs = s.rope_table(p, dims);
      auto want = x;
      std::vector<double> tol(x.size(), 1e-30);
      int const half = dims / 2;
      for (std::int64_t t = 0; t < 8; ++t)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < half; ++i) {
            std::size_t const base = static_cast<std::size_t>((t * heads + h) * head_dim);
            bool const neox = kind == tf::backend::rope_kind::neox;
            std::size_t const a = base + static_cast<std::size_t>(neox ? i : 2 * i);
            std::size_t const b = base + static_cast<std::size_t>(neox ? i + half : 2 * i + 1);
            float const c = cs[static_cast<std::size_t>(t * dims + i)];
            float const sn = cs[static_cast<std::size_t>(t * dims + half + i)];
            // The rotated pair is good to 2e-6 of its length (its parts may cancel).
            tol[a] = tol[b] = 2e-6 * (std::abs(want[a]) + std::abs(want[b]));
            if (neox)
              em::rotate_neox(want[a], want[b], c, sn);
            else
              em::rotate_interleaved(want[a], want[b], c, sn);
          }
      CHECK(worst(want, xb.data, [&](std::size_t i) { return tol[i]; }) <= 1.0);
    }
}

namespace {

// softmax(score) . v in double for one query (q already scaled) over keys k_rows, v_rows.
std::vector<double> attend_double(float const* q, int head_dim, int keys,
                                  float const* const* k_rows, float const* const* v_rows,
                                  float cap) {
  std::vector<double> s(static_cast<std::size_t>(keys)), out(static_cast<std::size_t>(head_dim));
  for (int j = 0; j < keys; ++j) {
    double dot = 0.0;
    for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k_rows[j][d];
    s[static_cast<std::size_t>(j)] = cap > 0.0f ? cap * std::tanh(dot / cap) : dot;
  }
  double const mx = *std::max_element(s.begin(), s.end());
  double z = 0.0;
  for (auto& v : s) z += v = std::exp(v - mx);
  for (int j = 0; j < keys; ++j)
    for (int d = 0; d < head_dim; ++d)
      out[static_cast<std::size_t>(d)] += s[static_cast<std::size_t>(j)] / z * v_rows[j][d];
  return out;
}

// What an f32 attention of one query may be off by, relative to the largest |v|: an ulp of each
// score's largest possible dot (the sum of |q_d k_d|), which its weight carries, and four ulp
// for the f32 sums of weights and weighted values.
double attention_tolerance(float const* q, int head_dim, int keys, float const* const* k_rows,
                           float const* const* v_rows) {
  double mag = 0.0, vmax = 0.0;
  for (int j = 0; j < keys; ++j) {
    double m = 0.0;
    for (int d = 0; d < head_dim; ++d) {
      m += std::abs(static_cast<double>(q[d]) * k_rows[j][d]);
      vmax = std::max(vmax, std::abs(static_cast<double>(v_rows[j][d])));
    }
    mag = std::max(mag, m);
  }
  return vmax * (0x1p-22 + 0x1p-24 * mag);
}

}  // namespace

TEST_CASE("the tiled online softmax matches a double-precision softmax") {
  for (int head_dim : {64, 80, 256})
    for (int keys : {1, 31, 32, 33, 100, 1000})
      for (float spread : {1.0f, 6.0f})
        for (float cap : {0.0f, 10.0f}) {
          INFO("head_dim " << head_dim << " keys " << keys << " spread " << spread << " cap "
                           << cap);
          auto const hd = static_cast<std::size_t>(head_dim);
          auto const n = static_cast<std::size_t>(keys);
          auto q = random_values(hd, 16 + static_cast<unsigned>(keys), 1.0f);
          auto const k = random_values(n * hd, 17, 1.0f);
          auto const v = random_values(n * hd, 18, 1.0f);
          float const scale = spread / std::sqrt(static_cast<float>(head_dim));
          for (auto& e : q) e *= scale;
          std::vector<float const*> k_rows(n), v_rows(n);
          for (std::size_t j = 0; j < n; ++j) {
            k_rows[j] = k.data() + j * hd;
            v_rows[j] = v.data() + j * hd;
          }
          std::vector<float> got(hd);
          am::attend_query(q.data(), head_dim, keys, k_rows.data(), v_rows.data(), cap, got.data());
          auto const ref =
              attend_double(q.data(), head_dim, keys, k_rows.data(), v_rows.data(), cap);
          double const tol =
              attention_tolerance(q.data(), head_dim, keys, k_rows.data(), v_rows.data());
          double err = 0.0;
          for (std::size_t d = 0; d < hd; ++d) err = std::max(err, std::abs(got[d] - ref[d]));
          CHECK(err <= tol);
        }
  // Before the first tile nothing is kept; a lane fold adds every lane once.
  CHECK(am::rescale(-std::numeric_limits<float>::infinity(), 3.0f) == 0.0f);
  float lanes[am::lanes];
  for (int i = 0; i < am::lanes; ++i)
    lanes[i] = static_cast<float>(1 << (i % 16)) * (i < 16 ? 1 : 2);
  CHECK(am::fold_lanes(lanes) == 3.0f * 65535.0f);
}

TEST_CASE("the attention kernel's order matches the CPU backend's over an f32 paged cache") {
  cpu be;
  int const kv_heads = 2, heads = 4, page_tokens = 16;
  for (int head_dim : {64, 80})
    for (auto [window, cap, spread] :
         {std::tuple{0, 0.0f, 1.0f}, std::tuple{20, 0.0f, 1.0f}, std::tuple{0, 15.0f, 8.0f}}) {
      INFO("head_dim " << head_dim << " window " << window << " cap " << cap);
      auto kv = be.make_kv_store({12, page_tokens, tf::kv_dtype::f32, 0}, {1, kv_heads, head_dim});
      std::int64_t const kv_dim = kv_heads * head_dim, q_dim = heads * head_dim;
      // Two streams of 48 and 40 positions in scattered pages: a prompt step, then a decode step.
      std::vector<std::vector<std::int32_t>> const tables = {{3, 0, 7}, {1, 5, 2}};
      std::int32_t const lengths[2] = {48, 40};
      std::vector<std::vector<float>> k_all, v_all;
      for (unsigned r = 0; r < 2; ++r) {
        k_all.push_back(random_values(static_cast<std::size_t>(lengths[r] * kv_dim), 20 + r, 1.0f));
        v_all.push_back(random_values(static_cast<std::size_t>(lengths[r] * kv_dim), 22 + r, 1.0f));
      }
      float const scale = spread / std::sqrt(static_cast<float>(head_dim));
      std::vector<std::int32_t> const tokens(48, 0);
      for (auto [first0, count0, first1, count1] :
           {std::tuple{0, 45, 0, 38}, std::tuple{45, 3, 38, 2}}) {
        std::int32_t const first[2] = {first0, first1}, count[2] = {count0, count1};
        std::vector<tf::batch_row> rows;
        buffer kb{{}, 0, kv_dim}, vb{{}, 0, kv_dim}, qb{{}, 0, q_dim};
        for (unsigned r = 0; r < 2; ++r) {
          rows.push_back(
              {std::span(tokens).first(static_cast<std::size_t>(count[r])), first[r], tables[r]});
          auto const from = static_cast<std::ptrdiff_t>(first[r] * kv_dim);
          auto const to = from + static_cast<std::ptrdiff_t>(count[r] * kv_dim);
          kb.data.insert(kb.data.end(), k_all[r].begin() + from, k_all[r].begin() + to);
          vb.data.insert(vb.data.end(), v_all[r].begin() + from, v_all[r].begin() + to);
          kb.rows = vb.rows = qb.rows = kb.rows + count[r];
        }
        qb.data = random_values(static_cast<std::size_t>(qb.rows * q_dim), 24 + first0, 1.0f);
        auto const& s = be.begin(rows, kv, 1);
        be.kv_write(s, kv, 0, kb, vb);
        buffer out;
        be.attend(s, kv, 0, qb, out, {heads, kv_heads, head_dim, scale, window, cap});

        std::vector<float> want(out.data.size()), qs(static_cast<std::size_t>(head_dim));
        std::vector<double> tol(out.data.size());
        std::int64_t t = 0;
        for (unsigned r = 0; r < 2; ++r)
          for (std::int32_t i = 0; i < count[r]; ++i, ++t) {
            std::int32_t const p = first[r] + i, lo = window > 0 ? std::max(0, p - window + 1) : 0;
            for (int h = 0; h < heads; ++h) {
              int const kvh = h / (heads / kv_heads);
              std::vector<float const*> k_rows, v_rows;
              for (std::int32_t j = lo; j <= p; ++j) {
                k_rows.push_back(k_all[r].data() + j * kv_dim + kvh * head_dim);
                v_rows.push_back(v_all[r].data() + j * kv_dim + kvh * head_dim);
              }
              float const* qh = qb.data.data() + t * q_dim + h * head_dim;
              for (int d = 0; d < head_dim; ++d) qs[static_cast<std::size_t>(d)] = qh[d] * scale;
              auto const at = static_cast<std::size_t>(t * q_dim + h * head_dim);
              int const keys = p - lo + 1;
              am::attend_query(qs.data(), head_dim, keys, k_rows.data(), v_rows.data(), cap,
                               want.data() + at);
              double const e =
                  attention_tolerance(qs.data(), head_dim, keys, k_rows.data(), v_rows.data());
              std::fill_n(tol.begin() + static_cast<std::ptrdiff_t>(at), head_dim, e);
            }
          }
        CHECK(worst(want, out.data, [&](std::size_t i) { return tol[i]; }) <= 1.0);
      }
    }
}

TEST_CASE("the MoE combine and the scaled add round as the CPU backend does") {
  int const k = 8;
  std::int64_t const cols = 97;
  auto const y = random_values(static_cast<std::size_t>(k * cols), 30, 2.0f);
  auto const w = random_values(static_cast<std::size_t>(k), 31, 0.3f, 0.2f);
  for (std::int64_t c = 0; c < cols; ++c) {
    // The CPU backend's routed sum: acc += weight * result, in pick order, each product rounded.
    float acc = 0.0f;
    double exact = 0.0, mag = 0.0;
    for (int j = 0; j < k; ++j) {
      float const prod = w[static_cast<std::size_t>(j)] * y[static_cast<std::size_t>(j * cols + c)];
      acc += prod;
      exact += static_cast<double>(w[static_cast<std::size_t>(j)]) *
               y[static_cast<std::size_t>(j * cols + c)];
      mag += std::abs(static_cast<double>(prod));
    }
    float const got = em::weighted_picks(w.data(), y.data() + c, cols, k);
    CHECK(std::abs(got - acc) <= 2e-6 * std::abs(acc) + 1e-30);
    CHECK(std::abs(got - exact) <= 1.2e-7 * k * mag);
  }
  // out + sigmoid(gate) y with the product rounded first, as the shared expert's y *= g; out += y.
  auto const out = random_values(256, 32, 1.0f);
  auto const ys = random_values(256, 33, 1.0f);
  float const g = tf::backend::cpu_parts::sigmoid(0.7f);
  for (std::size_t i = 0; i < out.size(); ++i) {
    float sh = ys[i];
    sh *= g;
    float const want = out[i] + sh;
    CHECK(std::abs(em::add_scaled(out[i], ys[i], em::sigmoid(0.7f)) - want) <=
          2e-6 * std::abs(want) + 1e-30);
  }
}
