// Tests kernels/cpu/kv_rows.hpp: the AVX2/F16C row kernels give the scalar ones' bits, and the
// f16 GeGLU table equals rounding gelu's input and output to f16.
#include <kernels/cpu/kv_rows.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
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

    // Four keys or values at once: each result is the one-at-a-time kernel's, bit for bit.
    std::vector<std::vector<float>> kfs;
    std::vector<std::vector<std::uint16_t>> ks;
    for (int j = 0; j < 4; ++j) {
      kfs.push_back(normal_floats(un, 2.0f, gen));
      ks.emplace_back(un);
      rows::to_f16(kfs.back().data(), ks.back().data(), n);
    }
    float const* kf4[4] = {kfs[0].data(), kfs[1].data(), kfs[2].data(), kfs[3].data()};
    std::uint16_t const* k4[4] = {ks[0].data(), ks[1].data(), ks[2].data(), ks[3].data()};
    float d4[4], f4[4];
    rows::dot4(s1.data(), k4, n, d4);
    rows::dot4(q.data(), kf4, n, f4);
    for (int j = 0; j < 4; ++j) {
      float const dj = rows::scalar::dot(s1.data(), k4[j], n);
      float const fj = rows::scalar::dot(q.data(), kf4[j], n);
      CHECK(std::memcmp(&d4[j], &dj, sizeof dj) == 0);
      CHECK(std::memcmp(&f4[j], &fj, sizeof fj) == 0);
    }
    float const a4[4] = {0.37f, -1.1f, 0.002f, 3.5f};
    auto p1 = normal_floats(un, 1.0f, gen);
    auto p2 = p1, p3 = p1, p4 = p1;
    for (int j = 0; j < 4; ++j) {
      rows::scalar::axpy(a4[j], k4[j], p1.data(), n);
      rows::scalar::axpy(a4[j], kf4[j], p3.data(), n);
    }
    rows::axpy4(a4, k4, p2.data(), n);
    rows::axpy4(a4, kf4, p4.data(), n);
    CHECK(same_bits(p1, p2));
    CHECK(same_bits(p3, p4));
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
