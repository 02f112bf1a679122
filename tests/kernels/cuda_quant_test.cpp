// Tests kernels/cuda/quant.hpp on the host: its block layouts and dequantization against the CPU
// backend's reference, and its matvec order against an independent emulation of the warp.
#include <kernels/cpu/dequant.hpp>
#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cpu/vec_dot.hpp>
#include <kernels/cuda/quant.hpp>
#include <tf/model/tensor_type.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace cpu = tf::kernels::cpu;
namespace cuda = tf::kernels::cuda;
using tf::model::tensor_type;

namespace {

// Every type the CUDA kernels read, as the brief and launch.hpp list them.
constexpr tensor_type cuda_types[] = {
    tensor_type::f32,  tensor_type::f16,  tensor_type::bf16, tensor_type::q4_0, tensor_type::q4_1,
    tensor_type::q5_0, tensor_type::q5_1, tensor_type::q8_0, tensor_type::q2_k, tensor_type::q3_k,
    tensor_type::q4_k, tensor_type::q5_k, tensor_type::q6_k, tensor_type::q8_k};

constexpr bool layout_matches(tensor_type t) {
  const auto id = static_cast<std::uint32_t>(t);
  const auto tr = tf::model::traits_of(t);
  return cuda::block_bytes(id) == tr.block_bytes && cuda::block_elems(id) == tr.block_elems;
}

constexpr bool all_layouts_match() {
  for (auto t : cuda_types)
    if (!layout_matches(t)) return false;
  return true;
}
static_assert(all_layouts_match(), "a CUDA block size differs from tf::model::traits_of");

constexpr bool listed(std::uint32_t id) {
  for (auto t : cuda_types)
    if (static_cast<std::uint32_t>(t) == id) return true;
  return false;
}

constexpr std::uint32_t id_of(tensor_type t) {
  return static_cast<std::uint32_t>(t);
}

std::uint32_t bits(float f) {
  return std::bit_cast<std::uint32_t>(f);
}

void put_u16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}

// A random finite half: any sign, exponent 0..30 (subnormals included), any mantissa.
std::uint16_t finite_half(std::mt19937& gen) {
  std::uniform_int_distribution<int> h(0, 0xffff);
  for (;;) {
    const auto v = static_cast<std::uint16_t>(h(gen));
    if ((v & 0x7c00u) != 0x7c00u) return v;
  }
}

// A half of magnitude in [2^-8, 2^-4), random sign: scales whose products stay ordinary.
std::uint16_t modest_half(std::mt19937& gen) {
  std::uniform_real_distribution<float> mag(0x1p-8f, 0x1p-4f);
  std::bernoulli_distribution neg(0.5);
  return cpu::fp32_to_fp16(neg(gen) ? -mag(gen) : mag(gen));
}

// Byte offsets of a block's f16 scale fields, from the CPU backend's structs (not from the CUDA
// layout under test); Q8_K's f32 scale is handled apart.
std::vector<std::size_t> half_scale_offsets(tensor_type t) {
  using namespace cpu;
  switch (t) {
    case tensor_type::q4_0:
      return {offsetof(block_q4_0, d)};
    case tensor_type::q4_1:
      return {offsetof(block_q4_1, d), offsetof(block_q4_1, m)};
    case tensor_type::q5_0:
      return {offsetof(block_q5_0, d)};
    case tensor_type::q5_1:
      return {offsetof(block_q5_1, d), offsetof(block_q5_1, m)};
    case tensor_type::q8_0:
      return {offsetof(block_q8_0, d)};
    case tensor_type::q2_k:
      return {offsetof(block_q2_k, d), offsetof(block_q2_k, dmin)};
    case tensor_type::q3_k:
      return {offsetof(block_q3_k, d)};
    case tensor_type::q4_k:
      return {offsetof(block_q4_k, d), offsetof(block_q4_k, dmin)};
    case tensor_type::q5_k:
      return {offsetof(block_q5_k, d), offsetof(block_q5_k, dmin)};
    case tensor_type::q6_k:
      return {offsetof(block_q6_k, d)};
    default:
      return {};
  }
}

// A random row of `cols` elements of t at byte `offset` of the returned buffer (rows are only
// byte-aligned): random quant bytes, finite scales (any finite half, or modest ones), finite
// F32/F16/BF16 elements.
std::vector<std::uint8_t> random_row(tensor_type t, std::int64_t cols, std::size_t offset,
                                     bool modest, std::mt19937& gen) {
  const auto tr = tf::model::traits_of(t);
  const std::int64_t blocks = cols / tr.block_elems;
  std::vector<std::uint8_t> buf(offset + static_cast<std::size_t>(blocks * tr.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : buf) b = static_cast<std::uint8_t>(byte(gen));
  std::uint8_t* row = buf.data() + offset;
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (std::int64_t i = 0; i < blocks; ++i) {
    std::uint8_t* b = row + i * tr.block_bytes;
    if (t == tensor_type::f32) {
      float v = unit(gen);
      if (!modest) v = std::bit_cast<float>(static_cast<std::uint32_t>(gen()) & 0xbfffffffu);
      std::memcpy(b, &v, 4);  // finite: the exponent's top bit cleared
    } else if (t == tensor_type::f16) {
      put_u16(b, modest ? cpu::fp32_to_fp16(unit(gen)) : finite_half(gen));
    } else if (t == tensor_type::bf16) {
      const std::uint16_t v =
          modest ? cpu::fp32_to_bf16(unit(gen)) : static_cast<std::uint16_t>(gen() & 0xbfffu);
      put_u16(b, v);
    } else if (t == tensor_type::q8_k) {
      const float d = modest ? unit(gen) * 0x1p-6f : std::ldexp(unit(gen), byte(gen) / 4 - 40);
      std::memcpy(b + offsetof(cpu::block_q8_k, d), &d, 4);
    } else {
      for (auto off : half_scale_offsets(t))
        put_u16(b + off, modest ? modest_half(gen) : finite_half(gen));
    }
  }
  return buf;
}

std::vector<float> random_x(std::int64_t cols, std::mt19937& gen) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(cols));
  for (auto& v : x) v = unit(gen);
  return x;
}

std::vector<float> cpu_dequant(tensor_type t, std::uint8_t const* row, std::int64_t cols) {
  std::vector<float> w(static_cast<std::size_t>(cols));
  cpu::dequantize_row(t, row, w.data(), cols);
  return w;
}

// The warp as the kernel runs it, written independently of quant.hpp: lane l fuses the products
// of chunks l, l + 32, ... in element order, then every lane adds its xor-partner's sum for
// offsets 16, 8, 4, 2, 1. Returns lane 0's total; `agree` says whether all lanes ended equal.
float emulate_warp(std::vector<float> const& w, float const* x, bool& agree) {
  float lane[32] = {};
  for (std::size_t i = 0; i < w.size(); ++i) {
    float& acc = lane[(i / 32) % 32];
    acc = std::fma(w[i], x[i], acc);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ offset];
    std::copy(next, next + 32, lane);
  }
  agree = std::all_of(lane, lane + 32, [&](float v) { return bits(v) == bits(lane[0]); });
  return lane[0];
}

struct exact_dot {
  double value = 0;      // sum w x in double (exact enough: 53-bit products of 24-bit operands)
  double magnitude = 0;  // sum |w x|
};

exact_dot dot_in_double(std::vector<float> const& w, float const* x) {
  exact_dot d;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double p = static_cast<double>(w[i]) * static_cast<double>(x[i]);
    d.value += p;
    d.magnitude += std::fabs(p);
  }
  return d;
}

constexpr double unit_roundoff = 0x1p-24;

}  // namespace

TEST_CASE("supported() is exactly the listed types", "[cuda][quant]") {
  int count = 0;
  for (std::uint32_t id = 0; id < 64; ++id) {
    INFO("type " << id);
    CHECK(cuda::supported(id) == listed(id));
    CHECK((cuda::block_bytes(id) != 0) == listed(id));
    count += cuda::supported(id) ? 1 : 0;
  }
  CHECK(count == 14);
  CHECK_FALSE(cuda::supported(id_of(tensor_type::q8_1)));  // the CPU reads it; no kernel needs it
}

TEST_CASE("block sizes are the GGUF ones", "[cuda][quant]") {
  for (auto t : cuda_types) {
    const auto tr = tf::model::traits_of(t);
    INFO(tr.name);
    CHECK(cuda::block_bytes(id_of(t)) == tr.block_bytes);
    CHECK(cuda::block_elems(id_of(t)) == tr.block_elems);
    CHECK(cuda::is_float_type(id_of(t)) == (tr.block_elems == 1));
  }
}

TEST_CASE("f16 and bf16 conversions are exact for every bit pattern", "[cuda][quant]") {
  int f16_bad = 0, bf16_bad = 0;
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto u = static_cast<std::uint16_t>(h);
    const float want = cpu::fp16_to_fp32(u), got = cuda::f16_to_f32(u);
    // NaN payloads are not part of the contract: a NaN only has to stay NaN.
    const bool same = std::isnan(want) ? std::isnan(got) : bits(got) == bits(want);
    if (!same && f16_bad++ < 5) UNSCOPED_INFO("f16 " << h << ": " << got << " want " << want);
    if (bits(cuda::bf16_to_f32(u)) != bits(cpu::bf16_to_fp32(u))) ++bf16_bad;
  }
  CHECK(f16_bad == 0);
  CHECK(bf16_bad == 0);
}

TEST_CASE("dequant_chunk32 is the CPU backend's dequantize_row bit for bit", "[cuda][quant]") {
  std::mt19937 gen(20240611);
  for (auto t : cuda_types) {
    const auto tr = tf::model::traits_of(t);
    SECTION(std::string(tr.name)) {
      // Three blocks or super-blocks (a whole number of each), at an odd address.
      const std::int64_t cols = std::max(3 * tr.block_elems, 96);
      for (int trial = 0; trial < 50; ++trial) {
        const auto buf = random_row(t, cols, 1, false, gen);
        const std::uint8_t* row = buf.data() + 1;
        const auto want = cpu_dequant(t, row, cols);
        int bad = 0;
        for (std::int64_t c = 0; c < cols / 32; ++c) {
          float got[32];
          std::fill(got, got + 32, -12345.0f);
          REQUIRE(cuda::dequant_chunk32(id_of(t), row, c, got));
          for (int j = 0; j < 32; ++j) {
            // Every scale and element is finite here, so there is no NaN to excuse.
            const float w = want[static_cast<std::size_t>(32 * c + j)];
            if (bits(got[j]) != bits(w) && bad++ < 5)
              UNSCOPED_INFO(tr.name << " element " << 32 * c + j << ": " << got[j] << " want "
                                    << w);
          }
        }
        REQUIRE(bad == 0);
      }
    }
  }
}

TEST_CASE("dequant_chunk32 refuses an unsupported type and leaves out alone", "[cuda][quant]") {
  const std::uint8_t row[64] = {};
  for (std::uint32_t id : {id_of(tensor_type::q8_1), 16u, 24u, 28u, 29u, 31u}) {
    INFO("type " << id);
    float out[32];
    std::fill(out, out + 32, 7.0f);
    CHECK_FALSE(cuda::dequant_chunk32(id, row, 0, out));
    CHECK(std::all_of(out, out + 32, [](float v) { return v == 7.0f; }));
    CHECK(std::isnan(cuda::matvec_row_reference(id, row, std::vector<float>(32, 1.0f).data(), 32)));
  }
}

TEST_CASE("a partial last chunk of a float row", "[cuda][quant]") {
  CHECK(cuda::chunk_count(0) == 0);
  CHECK(cuda::chunk_count(1) == 1);
  CHECK(cuda::chunk_count(32) == 1);
  CHECK(cuda::chunk_count(33) == 2);
  CHECK(cuda::chunk_length(33, 0) == 32);
  CHECK(cuda::chunk_length(33, 1) == 1);
  CHECK(cuda::chunk_length(64, 1) == 32);

  std::mt19937 gen(7);
  for (auto t : {tensor_type::f32, tensor_type::f16, tensor_type::bf16}) {
    INFO(tf::model::traits_of(t).name);
    const auto buf = random_row(t, 45, 3, false, gen);
    const std::uint8_t* row = buf.data() + 3;
    const auto want = cpu_dequant(t, row, 45);
    float got[32];
    std::fill(got, got + 32, -12345.0f);
    REQUIRE(cuda::dequant_chunk(id_of(t), row, 1, 13, got));
    for (int j = 0; j < 13; ++j)
      CHECK(bits(got[j]) == bits(want[static_cast<std::size_t>(32 + j)]));
    for (int j = 13; j < 32; ++j) CHECK(got[j] == -12345.0f);  // nothing past the row's end
  }
}

TEST_CASE("matvec_row_reference sums in the warp's order, near the exact dot", "[cuda][quant]") {
  std::mt19937 gen(99);
  for (auto t : cuda_types) {
    const auto tr = tf::model::traits_of(t);
    SECTION(std::string(tr.name)) {
      // One chunk, one lane pass, lanes wrapping round (more than 32 chunks), and ragged tails.
      std::vector<std::int64_t> widths;
      if (tr.block_elems == 1)
        widths = {1, 31, 32, 45, 640, 1057, 4096};
      else if (tr.block_elems == 32)
        widths = {32, 640, 1024, 1056, 4096};
      else
        widths = {256, 1280, 4096};
      for (auto cols : widths) {
        for (int trial = 0; trial < 4; ++trial) {
          INFO("cols " << cols << " trial " << trial);
          const auto buf = random_row(t, cols, 1, true, gen);
          const std::uint8_t* row = buf.data() + 1;
          const auto x = random_x(cols, gen);
          const auto w = cpu_dequant(t, row, cols);
          const float got = cuda::matvec_row_reference(id_of(t), row, x.data(), cols);

          // Bit for bit the warp's order (emulated here from the CPU's dequantized row).
          bool agree = false;
          const float warp = emulate_warp(w, x.data(), agree);
          CHECK(agree);
          CHECK(bits(got) == bits(warp));

          // Near the exact dot: fused products are exact, so the error is at most one rounding
          // per addition on the longest path (a lane's chunks' elements, then 5 butterfly adds).
          const auto exact = dot_in_double(w, x.data());
          const double depth = static_cast<double>((cols + 1023) / 1024 * 32 + 5);
          const double bound = depth * unit_roundoff * exact.magnitude;
          CHECK(std::fabs(static_cast<double>(got) - exact.value) <= bound);

          // Near the CPU backend's float dot (products rounded, 8 partial sums), where the CPU
          // path computes in f32 too; its quantized paths round x to 8 bits and are not compared.
          if (tr.block_elems == 1) {
            std::vector<std::uint16_t> halves(static_cast<std::size_t>(cols));
            float cpu_dot = 0;
            if (t == tensor_type::f32) {
              cpu_dot = cpu::portable::dot_f32(w.data(), x.data(), cols);
            } else {
              std::memcpy(halves.data(), row, halves.size() * 2);
              cpu_dot = t == tensor_type::f16
                            ? cpu::portable::dot_f16(halves.data(), x.data(), cols)
                            : cpu::portable::dot_bf16(halves.data(), x.data(), cols);
            }
            const double cpu_depth = static_cast<double>((cols + 7) / 8 + 4);
            CHECK(std::fabs(static_cast<double>(got) - static_cast<double>(cpu_dot)) <=
                  (depth + cpu_depth) * unit_roundoff * exact.magnitude);
          }
        }
      }
    }
  }
}

TEST_CASE("the warp's order is not the sequential order", "[cuda][quant]") {
  // The bit-for-bit check above only means something if another order gives other bits.
  std::mt19937 gen(5);
  int differ = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const auto buf = random_row(tensor_type::f32, 4096, 0, true, gen);
    const auto x = random_x(4096, gen);
    const auto w = cpu_dequant(tensor_type::f32, buf.data(), 4096);
    float sequential = 0;
    for (std::size_t i = 0; i < w.size(); ++i) sequential = std::fma(w[i], x[i], sequential);
    const float got =
        cuda::matvec_row_reference(id_of(tensor_type::f32), buf.data(), x.data(), 4096);
    if (bits(got) != bits(sequential)) ++differ;
  }
  CHECK(differ > 0);
}
