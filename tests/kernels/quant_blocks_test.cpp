// Tests kernels/cpu/quant_blocks.hpp: block sizes and the fp16/bf16 conversions.
#include <kernels/cpu/quant_blocks.hpp>

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

namespace cpu = tf::kernels::cpu;

TEST_CASE("fp16 -> fp32 matches the compiler's _Float16 for every half", "[quant_blocks]") {
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float ours = cpu::fp16_to_fp32(bits);
    const float ref = static_cast<float>(std::bit_cast<_Float16>(bits));
    if (std::isnan(ref) ? !std::isnan(ours)
                        : std::bit_cast<std::uint32_t>(ours) != std::bit_cast<std::uint32_t>(ref))
      ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("fp32 -> fp16 rounds to nearest even like _Float16", "[quant_blocks]") {
  // Every half round-trips exactly.
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = cpu::fp16_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    REQUIRE(cpu::fp32_to_fp16(f) == h);
  }
  // Random and boundary floats round like the compiler's conversion.
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> any;
  int mismatches = 0;
  for (int i = 0; i < 2000000; ++i) {
    std::uint32_t bits = any(gen);
    // Bias half of the samples into the half-precision range, where rounding matters.
    if (i % 2) bits = (bits & 0x807fffffu) | ((96u + (bits >> 24) % 48u) << 23);
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    const auto ref = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    if (cpu::fp32_to_fp16(f) != ref) ++mismatches;
  }
  CHECK(mismatches == 0);
  CHECK(cpu::fp32_to_fp16(65504.0f) == 0x7bff);
  CHECK(cpu::fp32_to_fp16(65520.0f) == 0x7c00);
  CHECK(cpu::fp32_to_fp16(-1e9f) == 0xfc00);
  CHECK(cpu::fp32_to_fp16(std::ldexp(1.0f, -25)) == 0);
  CHECK(cpu::fp32_to_fp16(std::ldexp(1.5f, -25)) == 1);
  CHECK((cpu::fp32_to_fp16(std::nanf("")) & 0x7fff) > 0x7c00);
}

TEST_CASE("bf16 conversions round to nearest even and keep NaN", "[quant_blocks]") {
  CHECK(cpu::fp32_to_bf16(1.0f) == 0x3f80);
  CHECK(cpu::bf16_to_fp32(0x3f80) == 1.0f);
  // 1 + 2^-8 is exactly between two bf16 values: ties go to the even one (1.0).
  CHECK(cpu::fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(cpu::fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(std::isnan(cpu::bf16_to_fp32(cpu::fp32_to_bf16(std::nanf("")))));
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = cpu::bf16_to_fp32(static_cast<std::uint16_t>(b));
    if (!std::isnan(f)) REQUIRE(cpu::fp32_to_bf16(f) == b);
  }
}

TEST_CASE("K-quant scale unpacking follows the 12-byte packing", "[quant_blocks]") {
  std::uint8_t s[12];
  for (int i = 0; i < 12; ++i) s[i] = static_cast<std::uint8_t>(37 * i + 11);
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc = 0, m = 0;
    cpu::k_scale_min(s, j, sc, m);
    // Rebuild from the bit layout described in quant_blocks.hpp, by a different route.
    const int want_sc = j < 4 ? s[j] % 64 : (s[j + 4] % 16) + 16 * (s[j - 4] / 64);
    const int want_m = j < 4 ? s[j + 4] % 64 : (s[j + 4] / 16) + 16 * (s[j] / 64);
    CHECK(sc == want_sc);
    CHECK(m == want_m);
    CHECK(sc < 64);
    CHECK(m < 64);
  }
  for (int j = 0; j < 16; ++j) {
    const int v = cpu::q3_k_scale(s, j);
    CHECK(v >= -32);
    CHECK(v < 32);
  }
}
