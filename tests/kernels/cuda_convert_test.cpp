// Tests kernels/cuda/convert_math.hpp on the host: the f32 -> f16 / bf16 rounding of the cuBLASLt
// path's activations against the CPU backend's fp32_to_fp16 / fp32_to_bf16, and its dequantized
// f16 / bf16 tiles against the CPU's dequantize_row then that rounding, bit for bit.
#include <kernels/cpu/dequant.hpp>
#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cuda/convert_math.hpp>
#include <tf/model/tensor_type.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace cpu = tf::kernels::cpu;
namespace cuda = tf::kernels::cuda;

namespace {

std::vector<std::uint8_t> read_bytes(std::filesystem::path const& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Both roundings of the f32 with bits `u` agree with the CPU's.
bool rounds_as_cpu(std::uint32_t u) {
  float const f = std::bit_cast<float>(u);
  return cuda::f32_to_f16_bits(f) == cpu::fp32_to_fp16(f) &&
         cuda::f32_to_bf16_bits(f) == cpu::fp32_to_bf16(f) &&
         cuda::round_to_half(f, cuda::half_kind::f16) == cpu::fp32_to_fp16(f) &&
         cuda::round_to_half(f, cuda::half_kind::bf16) == cpu::fp32_to_bf16(f);
}

}  // namespace

TEST_CASE("f32 -> f16 and bf16 round as the CPU backend does", "[cuda][convert]") {
  // Every exponent with the mantissas around each rounding boundary, both signs.
  std::int64_t bad = 0;
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t e = 0; e < 256; ++e)
      for (std::uint32_t m : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7fffu, 0x8000u,
                              0x8001u, 0x18000u, 0x400000u, 0x7fe000u, 0x7ff000u, 0x7fffffu}) {
        std::uint32_t const u = sign | (e << 23) | m;
        if (!rounds_as_cpu(u) && bad++ < 5) UNSCOPED_INFO("bits " << std::hex << u);
      }
  // A stride through all 2^32 patterns and random ones.
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 4099)
    if (!rounds_as_cpu(static_cast<std::uint32_t>(u)) && bad++ < 5)
      UNSCOPED_INFO("bits " << std::hex << u);
  std::mt19937 gen(7);
  for (int i = 0; i < 1000000; ++i)
    if (std::uint32_t const u = gen(); !rounds_as_cpu(u) && bad++ < 5)
      UNSCOPED_INFO("bits " << std::hex << u);
  CHECK(bad == 0);
  // The edges: the largest half, the first value that rounds to infinity, the smallest subnormal.
  CHECK(cuda::f32_to_f16_bits(65504.0f) == 0x7bffu);
  CHECK(cuda::f32_to_f16_bits(65520.0f) == 0x7c00u);
  CHECK(cuda::f32_to_f16_bits(-65520.0f) == 0xfc00u);
  CHECK(cuda::f32_to_f16_bits(0x1p-24f) == 0x0001u);
  CHECK(cuda::f32_to_f16_bits(0x1p-25f) == 0x0000u);  // a tie, to even
  CHECK((cuda::f32_to_f16_bits(std::nanf("")) & 0x7e00u) == 0x7e00u);
  CHECK(cuda::f32_to_bf16_bits(1.0f + 0x1p-8f) == 0x3f80u);  // a tie, to even
  CHECK((cuda::f32_to_bf16_bits(std::nanf("")) & 0x7fc0u) == 0x7fc0u);
}

TEST_CASE("dequantized half tiles are the CPU's dequantization rounded, bit for bit",
          "[cuda][convert]") {
  auto const dir = std::filesystem::path(TF_FIXTURES_DIR) / "quant";
  nlohmann::json index;
  std::ifstream(dir / "index.json") >> index;
  int types = 0;
  for (auto const& b : index.at("blocks")) {
    auto const id = b.at("id").get<std::uint32_t>();
    if (!cuda::supported(id)) continue;  // Q8_1 is no weight type of the CUDA kernels
    ++types;
    auto const type = static_cast<tf::model::tensor_type>(id);
    auto const n = b.at("elements").get<std::int64_t>();
    INFO(b.at("type").get<std::string>());
    auto const raw = read_bytes(dir / b.at("raw").get<std::string>());
    std::vector<float> want(static_cast<std::size_t>(n));
    cpu::dequantize_row(type, raw.data(), want.data(), n);
    for (auto const kind : {cuda::half_kind::f16, cuda::half_kind::bf16}) {
      int bad = 0;
      for (std::int64_t c = 0; c < cuda::chunk_count(n); ++c) {
        int const len = cuda::chunk_length(n, c);
        std::uint16_t got[32];
        REQUIRE(cuda::dequant_chunk_half(id, raw.data(), c, len, kind, got));
        for (int j = 0; j < len; ++j) {
          float const w = want[static_cast<std::size_t>(32 * c + j)];
          std::uint16_t const expect =
              kind == cuda::half_kind::f16 ? cpu::fp32_to_fp16(w) : cpu::fp32_to_bf16(w);
          if (got[j] != expect && bad++ < 5)
            UNSCOPED_INFO("element " << 32 * c + j << ": " << got[j] << " want " << expect);
        }
      }
      CHECK(bad == 0);
    }
  }
  CHECK(types >= 13);
  // A float row whose last chunk is partial leaves the rest of out alone.
  std::vector<std::uint8_t> row(40 * 4);
  for (int i = 0; i < 40; ++i) {
    float const f = 0.1f * static_cast<float>(i) - 1.3f;
    std::memcpy(row.data() + 4 * i, &f, 4);
  }
  std::uint16_t out[32];
  std::fill(out, out + 32, std::uint16_t{0xabcd});
  REQUIRE(
      cuda::dequant_chunk_half(cuda::gguf_type::f32, row.data(), 1, 8, cuda::half_kind::f16, out));
  for (int j = 0; j < 8; ++j) {
    float f;
    std::memcpy(&f, row.data() + 4 * (32 + j), 4);
    CHECK(out[j] == cpu::fp32_to_fp16(f));
  }
  CHECK(out[8] == 0xabcd);
  CHECK_FALSE(cuda::dequant_chunk_half(9999u, row.data(), 0, 32, cuda::half_kind::f16, out));
}
