// Tests kernels/cpu/kv_rows.hpp: the AVX2/F16C row kernels give the scalar ones' bits, and the
// f16 GeGLU table equals rounding gelu's input and output to f16.
#include <kernels/cpu/kv_rows.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

namespace cpu = tf::kernels::cpu;
namespace rows = tf::kernels::cpu::kv_rows;

namespace {

float gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

template <class T>
bool same_bits(std::vector<T> const& a, std::vector<T> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::vector<float> normal_floats(std::size_t n, float scale, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

}  // namespace

TEST_CASE("KV row kernels (f32 and f16) give the scalar kernels' bits, tails included") {
  std::mt19937 gen(3);
  for (std::int64_t n : {8, 13, 256}) {
    auto const un = static_cast<std::size_t>(n);
    auto q = normal_floats(un, 1.0f, gen), kf = normal_floats(un, 2.0f, gen);
    std::vector<std::uint16_t> k(un), k2(un);
    rows::scalar::to_f16(kf.data(), k.data(), n);
    rows::to_f16(kf.data(), k2.data(), n);
    CHECK(same_bits(k, k2));

    std::vector<float> s1(un), s2(un);
    rows::scalar::scale_round(q.data(), 0.0625f * 1.3f, s1.data(), n);
    rows::scale_round(q.data(), 0.0625f * 1.3f, s2.data(), n);
    CHECK(same_bits(s1, s2));

    float const d1 = rows::scalar::dot(s1.data(), k.data(), n),
                d2 = rows::dot(s1.data(), k.data(), n);
    CHECK(std::memcmp(&d1, &d2, sizeof d1) == 0);

    auto o1 = normal_floats(un, 1.0f, gen);
    auto o2 = o1;
    rows::scalar::axpy(0.37f, k.data(), o1.data(), n);
    rows::axpy(0.37f, k.data(), o2.data(), n);
    CHECK(same_bits(o1, o2));

    float const f1 = rows::scalar::dot(q.data(), kf.data(), n),
                f2 = rows::dot(q.data(), kf.data(), n);
    CHECK(std::memcmp(&f1, &f2, sizeof f1) == 0);
    rows::scalar::axpy(-1.7f, kf.data(), o1.data(), n);
    rows::axpy(-1.7f, kf.data(), o2.data(), n);
    CHECK(same_bits(o1, o2));

    // Several heads against several keys or values at once: each result is the one-at-a-time
    // scalar kernel's, bit for bit, for every shape attention uses.
    std::vector<std::vector<float>> kfs, qs;
    std::vector<std::vector<std::uint16_t>> ks;
    for (int j = 0; j < 4; ++j) {
      kfs.push_back(normal_floats(un, 2.0f, gen));
      ks.emplace_back(un);
      rows::to_f16(kfs.back().data(), ks.back().data(), n);
      qs.push_back(normal_floats(un, 1.0f, gen));
      rows::scale_round(qs.back().data(), 0.0625f, qs.back().data(), n);
    }
    float const* kf4[4] = {kfs[0].data(), kfs[1].data(), kfs[2].data(), kfs[3].data()};
    std::uint16_t const* k4[4] = {ks[0].data(), ks[1].data(), ks[2].data(), ks[3].data()};
    float const* q4[4] = {qs[0].data(), qs[1].data(), qs[2].data(), qs[3].data()};
    float const a8[8] = {0.37f, -1.1f, 0.002f, 3.5f, -0.25f, 1.75f, 0.0f, -2.5f};
    auto shape = [&](auto H, auto K) {
      constexpr int h_n = decltype(H)::value, k_n = decltype(K)::value;
      float d[8], f[8];
      rows::dot_heads<h_n, k_n>(q4, k4, n, d);
      rows::dot_heads<h_n, k_n>(q4, kf4, n, f);
      for (int h = 0; h < h_n; ++h)
        for (int j = 0; j < k_n; ++j) {
          float const dj = rows::scalar::dot(q4[h], k4[j], n);
          float const fj = rows::scalar::dot(q4[h], kf4[j], n);
          CHECK(std::memcmp(&d[h * k_n + j], &dj, sizeof dj) == 0);
          CHECK(std::memcmp(&f[h * k_n + j], &fj, sizeof fj) == 0);
        }
      std::vector<std::vector<float>> want(h_n, normal_floats(un, 1.0f, gen));
      auto got = want, want_f = want, got_f = want;
      float* got_p[4];
      float* got_fp[4];
      for (int h = 0; h < h_n; ++h) {
        for (int j = 0; j < k_n; ++j) {
          rows::scalar::axpy(a8[h * k_n + j], k4[j], want[h].data(), n);
          rows::scalar::axpy(a8[h * k_n + j], kf4[j], want_f[h].data(), n);
        }
        got_p[h] = got[h].data();
        got_fp[h] = got_f[h].data();
      }
      rows::axpy_heads<h_n, k_n>(a8, k4, got_p, n);
      rows::axpy_heads<h_n, k_n>(a8, kf4, got_fp, n);
      for (int h = 0; h < h_n; ++h) {
        CHECK(same_bits(want[h], got[h]));
        CHECK(same_bits(want_f[h], got_f[h]));
      }
    };
    shape(std::integral_constant<int, 1>{}, std::integral_constant<int, 4>{});
    shape(std::integral_constant<int, 2>{}, std::integral_constant<int, 4>{});
    shape(std::integral_constant<int, 4>{}, std::integral_constant<int, 2>{});
    shape(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{});
  }
}

TEST_CASE("the f16 GeGLU table equals gelu on f16-rounded input, rounded to f16") {
  rows::gelu_f16_table<gelu> const table;
  std::mt19937 gen(5);
  auto g = normal_floats(1003, 4.0f, gen), u = normal_floats(1003, 1.0f, gen);
  g[0] = -10.0f;
  g[1] = 10.0f;
  g[2] = -10.5f;
  g[3] = 12.25f;
  g[4] = 0.0f;
  std::vector<float> want(g.size()), got(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    float const x = g[i];
    float const r = x <= -10.0f  ? 0.0f
                    : x >= 10.0f ? x
                                 : rows::scalar::round_f16(gelu(rows::scalar::round_f16(x)));
    want[i] = r * u[i];
  }
  table.mul(g.data(), u.data(), got.data(), static_cast<std::int64_t>(g.size()));
  CHECK(same_bits(want, got));
  CHECK(table(10.5f) == 10.5f);
  CHECK(table(-11.0f) == 0.0f);
  CHECK(table(1.0f) == rows::scalar::round_f16(gelu(1.0f)));
}
