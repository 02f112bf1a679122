// Tests kernels/cpu/quantize_x86.hpp: the AVX2 quantizers write exactly the scalar ones' bytes.
#include <kernels/cpu/cpu_features.hpp>
#include <kernels/cpu/quantize_x86.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace cpu = tf::kernels::cpu;

namespace {

// Random rows, with blocks that hit the rounding edge cases: exact halves (x * id lands on
// k + 0.5), all zeros, one element far larger than the rest, negative maxima.
std::vector<float> tricky_rows(std::int64_t n, std::mt19937& gen) {
  std::vector<float> x(static_cast<std::size_t>(n));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 4), small(-127, 127);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    float* xb = x.data() + b * 32;
    switch (pick(gen)) {
      case 0:  // halves: max 127 gives id 1, so x * id == x exactly
        for (int j = 0; j < 32; ++j) xb[j] = static_cast<float>(small(gen)) + 0.5f;
        xb[0] = 127.0f;
        break;
      case 1:
        for (int j = 0; j < 32; ++j) xb[j] = 0.0f;
        break;
      case 2:
        for (int j = 0; j < 32; ++j) xb[j] = normal(gen) * 1e-3f;
        xb[7] = -40.0f;
        break;
      default:
        for (int j = 0; j < 32; ++j) xb[j] = normal(gen) * 3.0f;
    }
  }
  return x;
}

#if TF_KERNELS_X86
__attribute__((target("avx2,fma,f16c"))) void round_eight(const float* v, int* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), cpu::avx2::round8(_mm256_loadu_ps(v)));
}
#endif

bool have_avx2() {
  return cpu::detected_isa() != cpu::isa::portable;
}

}  // namespace

TEST_CASE("Q8_K quantization takes llama.cpp's signed maximum: d = m / -127, first of equals") {
  std::vector<float> x(256, 0.25f);
  x[5] = 3.0f;
  x[9] = -3.0f;  // as large, later: m is x[5]
  x[11] = 1.5f;
  cpu::block_q8_k b{};
  cpu::quantize_row_q8_k(x.data(), &b, 256);
  CHECK(b.d == 1.0f / (-127.0f / 3.0f));
  CHECK(b.qs[5] == -127);
  CHECK(b.qs[9] == 127);
  CHECK(b.qs[11] == static_cast<int>(std::nearbyint(-127.0f / 3.0f * 1.5f)));
  CHECK(b.bsums[0] == [&] {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += b.qs[j];
    return s;
  }());
  std::vector<float> zero(256, 0.0f);
  cpu::quantize_row_q8_k(zero.data(), &b, 256);
  CHECK(b.d == 0.0f);
  CHECK(b.bsums[3] == 0);
}

#if TF_KERNELS_X86
TEST_CASE("AVX2 Q8_0 quantization writes the scalar quantizer's bytes") {
  if (!have_avx2()) {
    SUCCEED("SKIP: this CPU has no AVX2");
    return;
  }
  std::mt19937 gen(7);
  for (std::int64_t n : {32, 640, 2048}) {
    auto x = tricky_rows(n, gen);
    std::vector<cpu::block_q8_0> a(static_cast<std::size_t>(n / 32)), b(a.size());
    cpu::quantize_row_q8_0(x.data(), a.data(), n);
    cpu::avx2::quantize_row_q8_0(x.data(), b.data(), n);
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
  }
}

TEST_CASE("AVX2 Q8_0u quantization writes the scalar Q8_0u bytes, and those are Q8_0's") {
  if (!have_avx2()) {
    SUCCEED("SKIP: this CPU has no AVX2");
    return;
  }
  std::mt19937 gen(9);
  for (std::int64_t n : {32, 640, 2048}) {
    auto x = tricky_rows(n, gen);
    auto const nb = static_cast<std::size_t>(n / 32);
    std::vector<cpu::block_q8_0u> a(nb), b(nb);
    std::vector<cpu::block_q8_0> q(nb);
    cpu::quantize_row_q8_0u(x.data(), a.data(), n);
    cpu::avx2::quantize_row_q8_0u(x.data(), b.data(), n);
    cpu::quantize_row_q8_0(x.data(), q.data(), n);
    REQUIRE(std::memcmp(a.data(), b.data(), nb * sizeof(a[0])) == 0);
    for (std::size_t i = 0; i < nb; ++i) {
      for (float d : a[i].d) CHECK(d == cpu::fp16_to_fp32(q[i].d));
      for (int j = 0; j < 32; ++j) CHECK(static_cast<int>(a[i].qs[j]) - 128 == q[i].qs[j]);
    }
  }
}

TEST_CASE("AVX2 Q8_0c quantization holds Q8_0's quants and scale and -(offset x 4-byte sums)") {
  if (!have_avx2()) {
    SUCCEED("SKIP: this CPU has no AVX2");
    return;
  }
  std::mt19937 gen(11);
  for (int shift : {3, 4, 7}) {
    for (std::int64_t n : {32, 640, 2048}) {
      auto x = tricky_rows(n, gen);
      auto const nb = static_cast<std::size_t>(n / 32);
      std::vector<cpu::block_q8_0c> c(nb);
      std::vector<cpu::block_q8_0> q(nb);
      cpu::avx2::quantize_row_q8_0c(x.data(), c.data(), n, shift);
      cpu::quantize_row_q8_0(x.data(), q.data(), n);
      for (std::size_t i = 0; i < nb; ++i) {
        for (float d : c[i].d) CHECK(d == cpu::fp16_to_fp32(q[i].d));
        REQUIRE(std::memcmp(c[i].qs, q[i].qs, 32) == 0);
        for (int j = 0; j < 8; ++j) {
          int sum = 0;
          for (int t = 0; t < 4; ++t) sum += q[i].qs[4 * j + t];
          CHECK(c[i].corr[j] == -(sum << shift));
        }
      }
    }
  }
}

TEST_CASE("AVX2 Q8_K quantization writes the scalar quantizer's bytes, bsums included") {
  if (!have_avx2()) {
    SUCCEED("SKIP: this CPU has no AVX2");
    return;
  }
  std::mt19937 gen(11);
  for (std::int64_t n : {256, 1024, 2048}) {
    auto x = tricky_rows(n, gen);
    std::vector<cpu::block_q8_k> a(static_cast<std::size_t>(n / 256)), b(a.size());
    cpu::quantize_row_q8_k(x.data(), a.data(), n);
    cpu::avx2::quantize_row_q8_k(x.data(), b.data(), n);
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].d == b[i].d);
      CHECK(std::memcmp(a[i].qs, b[i].qs, sizeof(a[i].qs)) == 0);
      CHECK(std::memcmp(a[i].bsums, b[i].bsums, sizeof(a[i].bsums)) == 0);
    }
  }
}

TEST_CASE("round8 rounds halves to even, as std::nearbyint (and llama.cpp's quantizers)") {
  if (!have_avx2()) {
    SUCCEED("SKIP: this CPU has no AVX2");
    return;
  }
  float v[8] = {0.5f, -0.5f, 1.5f, -2.5f, 0.49999997f, -126.5f, 3.0f, -0.0f};
  int got[8];
  round_eight(v, got);
  for (int i = 0; i < 8; ++i) CHECK(got[i] == static_cast<int>(std::nearbyint(v[i])));
  CHECK(got[0] == 0);
  CHECK(got[2] == 2);
  CHECK(got[3] == -2);
}
#else
TEST_CASE("AVX2 quantizers: not built on this architecture") {
  SUCCEED("SKIP: not an x86-64 build");
}
#endif
