// Tests kernels/cpu/ops.hpp against double-precision references.
#include <kernels/cpu/ops.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

namespace cpu = tf::kernels::cpu;

namespace {
std::vector<float> randn(std::size_t n, unsigned seed, float sd = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}
}  // namespace

TEST_CASE("rms_norm matches a double reference, in place too", "[ops]") {
  const std::int64_t rows = 3, n = 100;
  auto x = randn(rows * n, 1, 3.0f);
  auto w = randn(n, 2);
  for (float off : {0.0f, 1.0f}) {
    std::vector<float> y(x.size());
    cpu::rms_norm({x.data(), w.data(), y.data(), rows, n, 1e-6f, off});
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (std::int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
      const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
      for (std::int64_t i = 0; i < n; ++i) {
        const double want = x[r * n + i] * inv * (w[i] + off);
        REQUIRE(y[r * n + i] == Approx(want).epsilon(1e-5).margin(1e-6));
      }
    }
    auto z = x;
    cpu::rms_norm({z.data(), w.data(), z.data(), rows, n, 1e-6f, off});
    CHECK(z == y);
  }
  CHECK_THROWS_AS(cpu::rms_norm({x.data(), w.data(), x.data(), 1, 0}), tf::error);
}

TEST_CASE("rope rotates NeoX and interleaved pairs by pos * base^(-2j/n_rot)", "[ops]") {
  const std::int64_t rows = 2, heads = 3, hd = 16, n_rot = 12;
  const std::int64_t pos[] = {0, 37};
  for (auto style : {cpu::rope_style::neox, cpu::rope_style::interleaved}) {
    auto x = randn(rows * heads * hd, 3);
    auto y = x;
    cpu::rope({y.data(), pos, rows, heads, hd, n_rot, 10000.0f, 1.0f, style});
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t h = 0; h < heads; ++h) {
        const float* a = &x[(r * heads + h) * hd];
        const float* b = &y[(r * heads + h) * hd];
        for (std::int64_t j = 0; j < n_rot / 2; ++j) {
          const double ang = pos[r] * std::pow(10000.0, -2.0 * j / n_rot);
          const std::int64_t i0 = style == cpu::rope_style::neox ? j : 2 * j;
          const std::int64_t i1 = style == cpu::rope_style::neox ? j + n_rot / 2 : 2 * j + 1;
          REQUIRE(b[i0] == Approx(a[i0] * std::cos(ang) - a[i1] * std::sin(ang)).margin(1e-5));
          REQUIRE(b[i1] == Approx(a[i0] * std::sin(ang) + a[i1] * std::cos(ang)).margin(1e-5));
        }
        for (std::int64_t i = n_rot; i < hd; ++i) REQUIRE(b[i] == a[i]);  // beyond n_rot: as is
        if (pos[r] == 0)
          for (std::int64_t i = 0; i < hd; ++i) REQUIRE(b[i] == a[i]);
      }
  }
  std::vector<float> v(16);
  CHECK_THROWS_AS(cpu::rope({v.data(), pos, 1, 1, 16, 17}), tf::error);
}

TEST_CASE("softmax is stable and sums to one", "[ops]") {
  std::vector<float> x = {1000.0f, 999.0f, -50.0f, 998.5f, 1000.0f};
  std::vector<float> y(x.size());
  cpu::softmax(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  double z = 0;
  for (float v : x) z += std::exp(double(v) - 1000.0);
  double total = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    REQUIRE(y[i] == Approx(std::exp(double(x[i]) - 1000.0) / z).epsilon(1e-6).margin(1e-12));
    total += y[i];
  }
  CHECK(total == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("activations and elementwise ops match references", "[ops]") {
  auto a = randn(257, 4, 4.0f), b = randn(257, 5);
  const auto n = static_cast<std::int64_t>(a.size());
  std::vector<float> y(a.size());
  cpu::gelu_tanh(a.data(), y.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    const double want = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    REQUIRE(y[i] == Approx(want).epsilon(1e-5).margin(1e-6));
  }
  cpu::silu(a.data(), y.data(), n);
  for (std::int64_t i = 0; i < n; ++i)
    REQUIRE(y[i] == Approx(a[i] / (1 + std::exp(-double(a[i])))).epsilon(1e-5).margin(1e-6));
  cpu::gelu_tanh_mul(a.data(), b.data(), y.data(), n);
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == cpu::gelu_tanh(a[i]) * b[i]);
  cpu::silu_mul(a.data(), b.data(), y.data(), n);
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == cpu::silu(a[i]) * b[i]);
  cpu::mul(a.data(), b.data(), y.data(), n);
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == a[i] * b[i]);
  cpu::add(a.data(), b.data(), y.data(), n);
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == a[i] + b[i]);
  cpu::scale(a.data(), 0.5f, y.data(), n);
  for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == a[i] * 0.5f);
}
