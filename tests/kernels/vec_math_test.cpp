// Tests kernels/cpu/vec_math.hpp against libm: sum of exp, tanh softcap and tanh-GELU, with
// stated tolerances, tails (n not a multiple of 8) and the range ends.
#include <kernels/cpu/vec_math.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace vm = tf::kernels::cpu::vec_math;

namespace {

std::vector<float> spread(std::size_t n, float lo, float hi, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

}  // namespace

TEST_CASE("sum_exp is within 1e-6 relative of the double-precision sum") {
  for (std::size_t n : {1u, 7u, 8u, 1003u, 262144u}) {
    auto x = spread(n, -40.0f, 12.0f, static_cast<std::uint32_t>(n));
    x[0] = -100.0f;  // underflows to 0 in f32
    float const mx = *std::max_element(x.begin(), x.end());
    double const want = vm::scalar::sum_exp(x.data(), static_cast<std::int64_t>(n), mx);
    double const got = vm::sum_exp(x.data(), static_cast<std::int64_t>(n), mx);
    INFO("n = " << n);
    CHECK(std::fabs(got - want) <= 1e-6 * want);
  }
}

TEST_CASE(
    "sum_squares has the scalar partials' bits on every path and is within 1e-15 of the exact sum "
    "of the f32-rounded squares") {
  for (std::size_t n : {1u, 15u, 16u, 17u, 256u, 640u, 2047u}) {
    auto x = spread(n, -30.0f, 30.0f, static_cast<std::uint32_t>(n) + 7);
    x[0] = 1e-20f;
    auto const len = static_cast<std::int64_t>(n);
    double const want = vm::scalar::sum_squares(x.data(), len);
    double const got = vm::sum_squares(x.data(), len);
    INFO("n = " << n);
    CHECK(std::memcmp(&want, &got, sizeof got) == 0);
    long double exact = 0;
    for (float v : x) exact += static_cast<long double>(v * v);  // each square rounded to f32
    CHECK(exact != 0);
    CHECK(std::fabs(static_cast<double>(exact) - got) <= 1e-15 * static_cast<double>(exact));
  }
}

TEST_CASE("softcap is within 4e-7 * cap of tanh(x / cap) * cap, and saturates") {
  float const cap = 30.0f;
  auto x = spread(4099, -400.0f, 400.0f, 1);
  x[1] = 0.0f;
  x[2] = -1e-3f;
  x[3] = 1e9f;
  x[4] = -1e9f;
  auto y = x;
  vm::softcap(y.data(), static_cast<std::int64_t>(y.size()), cap);
  float worst = 0.0f;
  for (std::size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(y[i] - std::tanh(x[i] / cap) * cap));
  INFO("max abs error " << worst);
  CHECK(worst <= 4e-7f * cap);
  CHECK(y[3] == cap);
  CHECK(y[4] == -cap);
  CHECK(std::fabs(y[1]) == 0.0f);
}

TEST_CASE("gelu_tanh_mul is within 2e-6 (+ f32 rounding of y) relative of a double gelu") {
  auto g = spread(2051, -12.0f, 12.0f, 2), u = spread(2051, -2.0f, 2.0f, 3);
  g[0] = -1e4f;
  g[1] = 1e4f;
  g[2] = 0.0f;
  g[3] = -3.0f;
  std::vector<float> got(g.size()), portable(g.size());
  vm::gelu_tanh_mul(g.data(), u.data(), got.data(), static_cast<std::int64_t>(g.size()));
  vm::scalar::gelu_tanh_mul(g.data(), u.data(), portable.data(),
                            static_cast<std::int64_t>(g.size()));
  for (std::size_t i = 0; i < g.size(); ++i) {
    double const x = g[i];
    // 0.5 x (1 + tanh(y)) as x / (1 + e^{-2y}): no cancellation for very negative x.
    double const y = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    double const want = x / (1.0 + std::exp(-2.0 * y)) * u[i];
    INFO("x = " << g[i] << ", got " << got[i] << ", want " << want);
    // y itself is computed in f32: its rounding (~|2y| * 6e-8) is relative error in e^{-2y}.
    double const tol = (2e-6 + 2.4e-7 * std::fabs(2.0 * y)) * std::fabs(want) + 1e-30;
    CHECK(std::fabs(got[i] - want) <= tol);
    CHECK(std::fabs(portable[i] - want) <= tol);
  }
  CHECK(std::isfinite(got[0]));
  CHECK(got[1] == Approx(1e4f * u[1]));
}

TEST_CASE("max_of equals std::max over the row, NaNs ignored, tails included") {
  for (std::size_t n : {1u, 9u, 16u, 1003u, 262144u}) {
    auto x = spread(n, -50.0f, 50.0f, static_cast<std::uint32_t>(n) + 7);
    x[n / 2] = 60.0f;
    if (n > 3) x[1] = std::numeric_limits<float>::quiet_NaN();
    float want = -std::numeric_limits<float>::infinity();
    for (float v : x) want = std::max(want, v);
    INFO("n = " << n);
    CHECK(vm::max_of(x.data(), static_cast<std::int64_t>(n)) == want);
  }
  std::vector<float> none(5, -std::numeric_limits<float>::infinity());
  CHECK(vm::max_of(none.data(), 5) == -std::numeric_limits<float>::infinity());
}
