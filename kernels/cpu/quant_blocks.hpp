#pragma once
/// GGML quantization block layouts (byte-exact with GGUF files) and fp16/bf16 scalar conversions.
#include <tf/model/tensor_type.hpp>

#include <bit>
#include <cstdint>
#include <cstring>

namespace tf::kernels::cpu {

/// Elements per block of the 32-element formats (Q4_0 .. Q8_1).
inline constexpr int qk32 = 32;
/// Elements per super-block of the K-quants.
inline constexpr int qk256 = tf::model::qk_k;

// Half-precision scale fields are stored as raw IEEE binary16 bits (little-endian in the file).

/// Q4_0: y = d * (q - 8); element j < 16 is the low nibble of qs[j], j >= 16 the high nibble.
struct block_q4_0 {
  std::uint16_t d;            // fp16 scale
  std::uint8_t qs[qk32 / 2];  // [32] 4-bit quants, two per byte
};

/// Q4_1: y = d * q + m.
struct block_q4_1 {
  std::uint16_t d;            // fp16 scale
  std::uint16_t m;            // fp16 minimum
  std::uint8_t qs[qk32 / 2];  // [32] 4-bit quants
};

/// Q5_0: y = d * (q - 16); bit j of qh (little-endian u32) is bit 4 of element j.
struct block_q5_0 {
  std::uint16_t d;            // fp16 scale
  std::uint8_t qh[4];         // [32] fifth bits
  std::uint8_t qs[qk32 / 2];  // [32] low 4 bits
};

/// Q5_1: y = d * q + m.
struct block_q5_1 {
  std::uint16_t d;            // fp16 scale
  std::uint16_t m;            // fp16 minimum
  std::uint8_t qh[4];         // [32] fifth bits
  std::uint8_t qs[qk32 / 2];  // [32] low 4 bits
};

/// Q8_0: y = d * q.
struct block_q8_0 {
  std::uint16_t d;       // fp16 scale
  std::int8_t qs[qk32];  // [32]
};

/// Eight Q8_0 rows' block i side by side: their scales, then their quants, row by row. A weight
/// matrix in this layout (rows8) streams as one sequential run through the eight-row matvec.
struct block_q8_0x8 {
  std::uint16_t d[8];
  std::int8_t qs[8][qk32];
};
static_assert(sizeof(block_q8_0x8) == 8 * sizeof(block_q8_0));

/// Q8_1: y = d * q; s = d * sum(q) (used by dot products against Q4_1/Q5_1).
struct block_q8_1 {
  std::uint16_t d;       // fp16 scale
  std::uint16_t s;       // fp16 d * sum(qs)
  std::int8_t qs[qk32];  // [32]
};

/// Q2_K: 16 sub-blocks of 16; y = d * (sc & 15) * q - dmin * (sc >> 4).
struct block_q2_k {
  std::uint8_t scales[qk256 / 16];  // [16] low nibble scale, high nibble min
  std::uint8_t qs[qk256 / 4];       // [256] 2-bit quants
  std::uint16_t d;                  // fp16 super-block scale
  std::uint16_t dmin;               // fp16 super-block min scale
};

/// Q3_K: 16 sub-blocks of 16; y = d * (scale6 - 32) * (q2 - (hbit ? 0 : 4)).
struct block_q3_k {
  std::uint8_t hmask[qk256 / 8];  // [256] high bits
  std::uint8_t qs[qk256 / 4];     // [256] low 2 bits
  std::uint8_t scales[12];        // [16] 6-bit scales, packed
  std::uint16_t d;                // fp16 super-block scale
};

/// Q4_K: 8 sub-blocks of 32; y = d * sc * q - dmin * m (6-bit sc, m packed in scales).
struct block_q4_k {
  std::uint16_t d;             // fp16 super-block scale
  std::uint16_t dmin;          // fp16 super-block min scale
  std::uint8_t scales[12];     // [8] 6-bit scales + [8] 6-bit mins, packed
  std::uint8_t qs[qk256 / 2];  // [256] 4-bit quants
};

/// Q5_K: as Q4_K with a fifth bit per element in qh.
struct block_q5_k {
  std::uint16_t d;             // fp16 super-block scale
  std::uint16_t dmin;          // fp16 super-block min scale
  std::uint8_t scales[12];     // [8] scales + [8] mins, packed
  std::uint8_t qh[qk256 / 8];  // [256] fifth bits
  std::uint8_t qs[qk256 / 2];  // [256] low 4 bits
};

/// Q6_K: 16 sub-blocks of 16; y = d * scales[i/16] * (q6 - 32).
struct block_q6_k {
  std::uint8_t ql[qk256 / 2];      // [256] low 4 bits
  std::uint8_t qh[qk256 / 4];      // [256] high 2 bits
  std::int8_t scales[qk256 / 16];  // [16] 8-bit signed scales
  std::uint16_t d;                 // fp16 super-block scale
};

/// Q8_0 as the VNNI dots take it: the scale already widened from its f16 value and repeated in
/// eight lanes (one vector load per use), and q + 128 as unsigned bytes (VNNI multiplies unsigned
/// by signed bytes). An activation format only.
struct block_q8_0u {
  float d[8];           // fp16_to_fp32 of the Q8_0 block's f16 scale, eight times
  std::uint8_t qs[32];  // q + 128
};

/// Q8_0 as the VNNI one-row matvecs take it: the scale widened and repeated, q as signed bytes,
/// and per four bytes -(offset * their sum), where the weight's quants enter the dot as unsigned
/// bytes q + offset (128 for Q8_0, 16 for Q5_0, 8 for Q4_0); the correction starts each int32
/// lane, so the lane ends at the exact sum of q_w * q_x. An activation format only.
struct block_q8_0c {
  float d[8];            // fp16_to_fp32 of the Q8_0 block's f16 scale, eight times
  std::int8_t qs[32];    // q
  std::int32_t corr[8];  // -(offset * (qs[4j] + qs[4j+1] + qs[4j+2] + qs[4j+3]))
};

/// Q8_K: y = d * q; bsums[j] = sum of qs[16j .. 16j+15] (activation format for K-quant dots).
struct block_q8_k {
  float d;                         // f32 scale
  std::int8_t qs[qk256];           // [256]
  std::int16_t bsums[qk256 / 16];  // [16]
};

namespace detail {
template <class Block>
constexpr bool matches(tf::model::tensor_type t) {
  auto tr = tf::model::traits_of(t);
  return sizeof(Block) == static_cast<std::size_t>(tr.block_bytes);
}
}  // namespace detail

static_assert(detail::matches<block_q4_0>(tf::model::tensor_type::q4_0));
static_assert(detail::matches<block_q4_1>(tf::model::tensor_type::q4_1));
static_assert(detail::matches<block_q5_0>(tf::model::tensor_type::q5_0));
static_assert(detail::matches<block_q5_1>(tf::model::tensor_type::q5_1));
static_assert(detail::matches<block_q8_0>(tf::model::tensor_type::q8_0));
static_assert(detail::matches<block_q8_1>(tf::model::tensor_type::q8_1));
static_assert(detail::matches<block_q2_k>(tf::model::tensor_type::q2_k));
static_assert(detail::matches<block_q3_k>(tf::model::tensor_type::q3_k));
static_assert(detail::matches<block_q4_k>(tf::model::tensor_type::q4_k));
static_assert(detail::matches<block_q5_k>(tf::model::tensor_type::q5_k));
static_assert(detail::matches<block_q6_k>(tf::model::tensor_type::q6_k));
static_assert(detail::matches<block_q8_k>(tf::model::tensor_type::q8_k));
static_assert(tf::model::traits_of(tf::model::tensor_type::q4_k).block_elems == qk256);
static_assert(tf::model::traits_of(tf::model::tensor_type::q4_0).block_elems == qk32);

/// IEEE binary16 bits -> f32, exact (subnormals, infinities; NaN stays NaN). Branch-free: the
/// exponent is rebased by one multiply, and subnormal halves come from a biased subtraction.
constexpr float fp16_to_fp32(std::uint16_t h) {
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;  // exponent and mantissa, sign shifted out
  const float normal = std::bit_cast<float>((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  const float subnormal = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  const std::uint32_t bits = two_w < (1u << 27) ? std::bit_cast<std::uint32_t>(subnormal)
                                                : std::bit_cast<std::uint32_t>(normal);
  return std::bit_cast<float>(sign | bits);
}

/// f32 -> IEEE binary16 bits, round to nearest even (overflow to infinity, NaN stays NaN).
constexpr std::uint16_t fp32_to_fp16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  std::uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): shift the full mantissa with round-to-nearest-even.
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the smallest
    std::uint32_t e = abs >> 23;
    std::uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    std::uint32_t shift = 126u - e;  // 113 - e + 13
    std::uint32_t q = m >> shift;
    std::uint32_t rem = m & ((1u << shift) - 1u);
    std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  std::uint32_t q = r >> 13;
  std::uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // carry may roll into the exponent
  return static_cast<std::uint16_t>(sign | q);
}

/// bfloat16 bits -> f32 (exact).
constexpr float bf16_to_fp32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// f32 -> bfloat16 bits, round to nearest even; NaN becomes a quiet NaN.
constexpr std::uint16_t fp32_to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

/// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block.
constexpr void k_scale_min(const std::uint8_t* scales /* [12] */, int j, std::uint8_t& sc,
                           std::uint8_t& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = static_cast<std::uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

/// The signed 6-bit scale (-32..31) of sub-block j (0..15) of a Q3_K super-block.
constexpr int q3_k_scale(const std::uint8_t* scales /* [12] */, int j) {
  int low = j < 8 ? (scales[j] & 0x0f) : (scales[j - 8] >> 4);
  int high = (scales[8 + (j % 4)] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace tf::kernels::cpu
