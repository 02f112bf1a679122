#pragma once
/// The CUDA matmul's per-element arithmetic, host and device: GGUF block layouts read byte by byte,
/// dequantization of one 32-element chunk of a row, and the order in which a warp sums a row's
/// products, so that the host can compute exactly what the kernel computes.
#include <kernels/portable/hd.hpp>

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__CUDA_ARCH__)
#define TF_QUANT_UNROLL _Pragma("unroll")
#else
#define TF_QUANT_UNROLL
#endif

namespace tf::kernels::cuda {

/// GGUF's type numbers (as tf::model::tensor_type) of the types the kernels read.
namespace gguf_type {
inline constexpr std::uint32_t f32 = 0;
inline constexpr std::uint32_t f16 = 1;
inline constexpr std::uint32_t q4_0 = 2;
inline constexpr std::uint32_t q4_1 = 3;
inline constexpr std::uint32_t q5_0 = 6;
inline constexpr std::uint32_t q5_1 = 7;
inline constexpr std::uint32_t q8_0 = 8;
inline constexpr std::uint32_t q2_k = 10;
inline constexpr std::uint32_t q3_k = 11;
inline constexpr std::uint32_t q4_k = 12;
inline constexpr std::uint32_t q5_k = 13;
inline constexpr std::uint32_t q6_k = 14;
inline constexpr std::uint32_t q8_k = 15;
inline constexpr std::uint32_t bf16 = 30;
}  // namespace gguf_type

/// Elements of one chunk: the unit a lane dequantizes and sums at a time.
inline constexpr int chunk_elems = 32;
/// Lanes of a warp; lane l sums chunks l, l + 32, l + 64, ...
inline constexpr int warp_lanes = 32;

/// Elements per block (1 for the float types, 32 or 256 for the quantized ones); 0 if unsupported.
TF_HD constexpr int block_elems(std::uint32_t type) {
  using namespace gguf_type;
  switch (type) {
    case f32:
    case f16:
    case bf16:
      return 1;
    case q4_0:
    case q4_1:
    case q5_0:
    case q5_1:
    case q8_0:
      return 32;
    case q2_k:
    case q3_k:
    case q4_k:
    case q5_k:
    case q6_k:
    case q8_k:
      return 256;
    default:
      return 0;
  }
}

/// True for the types dequant_chunk32 reads.
TF_HD constexpr bool supported(std::uint32_t type) {
  return block_elems(type) != 0;
}

/// Bytes per block, as the GGUF file lays it out; 0 if unsupported.
TF_HD constexpr int block_bytes(std::uint32_t type) {
  using namespace gguf_type;
  switch (type) {
    case f32:
      return 4;
    case f16:
      return 2;
    case bf16:
      return 2;
    case q4_0:
      return 18;
    case q4_1:
      return 20;
    case q5_0:
      return 22;
    case q5_1:
      return 24;
    case q8_0:
      return 34;
    case q2_k:
      return 84;
    case q3_k:
      return 110;
    case q4_k:
      return 144;
    case q5_k:
      return 176;
    case q6_k:
      return 210;
    case q8_k:
      return 292;
    default:
      return 0;
  }
}

/// True for F32, F16 and BF16, whose rows may end in a chunk of fewer than 32 elements.
TF_HD constexpr bool is_float_type(std::uint32_t type) {
  return type == gguf_type::f32 || type == gguf_type::f16 || type == gguf_type::bf16;
}

/// Chunks in a row of `cols` elements (the last one partial when cols % 32 != 0).
TF_HD constexpr std::int64_t chunk_count(std::int64_t cols) {
  return (cols + chunk_elems - 1) / chunk_elems;
}

/// Elements of chunk `chunk` in a row of `cols`: 32, or the remainder for the last chunk.
TF_HD constexpr int chunk_length(std::int64_t cols, std::int64_t chunk) {
  const std::int64_t left = cols - chunk * chunk_elems;
  return left < chunk_elems ? static_cast<int>(left) : chunk_elems;
}

/// A little-endian u16 at any byte address.
TF_HD inline std::uint16_t read_u16(std::uint8_t const* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

/// A little-endian u32 at any byte address.
TF_HD inline std::uint32_t read_u32(std::uint8_t const* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

/// The float whose IEEE bits are `u`.
TF_HD inline float bits_to_f32(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

/// IEEE binary16 bits -> f32, exact; a NaN keeps its payload and comes back quiet (as an x86
/// multiply leaves it in the CPU backend's conversion).
TF_HD inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_f32(sign | 0x7f800000u | (man ? 0x400000u : 0u) | (man << 13));
  if (exp != 0) return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in f32 (man < 2^10, the result is a normal f32).
  const float magnitude = static_cast<float>(man) * 0x1p-24f;
  return sign ? -magnitude : magnitude;
}

/// bfloat16 bits -> f32 (exact: the top half of the f32).
TF_HD inline float bf16_to_f32(std::uint16_t b) {
  return bits_to_f32(static_cast<std::uint32_t>(b) << 16);
}

/// a * b + c with one rounding: the lane's step over one element.
TF_HD inline float fused(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

namespace quant_detail {

/// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7), packed in scales[12].
TF_HD inline void k_scale_min(std::uint8_t const* scales, int j, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

/// Q4_K / Q5_K: sub-block j's scale d * sc and min dmin * m, from the block's leading
/// [d f16][dmin f16][scales 12].
struct k_sub_scales {
  float dl, ml;
};
TF_HD inline k_sub_scales k_scales_of(std::uint8_t const* b, int j) {
  const float d = f16_to_f32(read_u16(b)), dmin = f16_to_f32(read_u16(b + 2));
  int sc = 0, m = 0;
  k_scale_min(b + 4, j, sc, m);
  return {d * static_cast<float>(sc), dmin * static_cast<float>(m)};
}

/// Q3_K: the signed 6-bit scale (-32..31) of sub-block j (0..15), packed in scales[12].
TF_HD inline int q3_k_scale(std::uint8_t const* scales, int j) {
  const int low = j < 8 ? (scales[j] & 0x0f) : (scales[j - 8] >> 4);
  const int high = (scales[8 + (j % 4)] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// One function per layout: `b` is the block, `sub` the chunk's index inside a 256-element
// super-block (K-quants only), out[32] the chunk's elements. Every product of a scale and quants
// that meets an addition below is exact (an f16 scale's 11 significant bits times integers of at
// most 11 bits fit in f32's 24), so fusing it into an FMA cannot change ggml's rounded result.

// Q4_0 [d f16][qs 16]: d * (q - 8); element j < 16 is the low nibble of qs[j], j >= 16 the high.
TF_HD inline void q4_0(std::uint8_t const* b, float* out) {
  const float d = f16_to_f32(read_u16(b));
  TF_QUANT_UNROLL
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>((b[2 + j] & 0x0f) - 8);
    out[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
  }
}

// Q4_1 [d f16][m f16][qs 16]: d * q + m.
TF_HD inline void q4_1(std::uint8_t const* b, float* out) {
  const float d = f16_to_f32(read_u16(b)), m = f16_to_f32(read_u16(b + 2));
  TF_QUANT_UNROLL
  for (int j = 0; j < 16; ++j) {
    out[j] = d * static_cast<float>(b[4 + j] & 0x0f) + m;
    out[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
  }
}

// Q5_0 [d f16][qh u32][qs 16]: d * (q - 16), bit j of qh is bit 4 of element j.
TF_HD inline void q5_0(std::uint8_t const* b, float* out) {
  const float d = f16_to_f32(read_u16(b));
  const std::uint32_t qh = read_u32(b + 2);
  TF_QUANT_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[6 + j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (b[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    out[j] = d * static_cast<float>(lo - 16);
    out[j + 16] = d * static_cast<float>(hi - 16);
  }
}

// Q5_1 [d f16][m f16][qh u32][qs 16]: d * q + m.
TF_HD inline void q5_1(std::uint8_t const* b, float* out) {
  const float d = f16_to_f32(read_u16(b)), m = f16_to_f32(read_u16(b + 2));
  const std::uint32_t qh = read_u32(b + 4);
  TF_QUANT_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int lo = (b[8 + j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (b[8 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    out[j] = d * static_cast<float>(lo) + m;
    out[j + 16] = d * static_cast<float>(hi) + m;
  }
}

// Q8_0 [d f16][qs i8 32]: d * q.
TF_HD inline void q8_0(std::uint8_t const* b, float* out) {
  const float d = f16_to_f32(read_u16(b));
  TF_QUANT_UNROLL
  for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(static_cast<std::int8_t>(b[2 + j]));
}

// Q2_K [scales 16][qs 64][d f16][dmin f16]: d * (sc & 15) * q - dmin * (sc >> 4), per 16.
TF_HD inline void q2_k(std::uint8_t const* b, int sub, float* out) {
  const float d = f16_to_f32(read_u16(b + 80)), dmin = f16_to_f32(read_u16(b + 82));
  const std::uint8_t* qs = b + 16 + (sub / 4) * 32;
  const int shift = 2 * (sub % 4);
  TF_QUANT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const int sc = b[2 * sub + half];
    const float dl = d * static_cast<float>(sc & 0x0f);
    const float ml = dmin * static_cast<float>(sc >> 4);
    TF_QUANT_UNROLL
    for (int l = 0; l < 16; ++l) {
      const int j = 16 * half + l;
      out[j] = dl * static_cast<float>((qs[j] >> shift) & 3) - ml;
    }
  }
}

// Q3_K [hmask 32][qs 64][scales 12][d f16]: d * scale6 * (q2 - (hbit ? 0 : 4)), per 16.
TF_HD inline void q3_k(std::uint8_t const* b, int sub, float* out) {
  const float d = f16_to_f32(read_u16(b + 108));
  const std::uint8_t* qs = b + 32 + (sub / 4) * 32;
  const int shift = 2 * (sub % 4);
  TF_QUANT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const float dl = d * static_cast<float>(q3_k_scale(b + 96, 2 * sub + half));
    TF_QUANT_UNROLL
    for (int l = 0; l < 16; ++l) {
      const int j = 16 * half + l;
      const int low = (qs[j] >> shift) & 3;
      const int hbit = (b[j] >> sub) & 1;  // hmask bit (sub / 4) * 4 + sub % 4
      out[j] = dl * static_cast<float>(low - (hbit ? 0 : 4));
    }
  }
}

// Q4_K [d f16][dmin f16][scales 12][qs 128]: d * sc * q - dmin * m, per 32.
TF_HD inline void q4_k(std::uint8_t const* b, int sub, float* out) {
  const auto [dl, ml] = k_scales_of(b, sub);
  const std::uint8_t* qs = b + 16 + (sub / 2) * 32;
  const int shift = 4 * (sub % 2);
  TF_QUANT_UNROLL
  for (int j = 0; j < 32; ++j) out[j] = dl * static_cast<float>((qs[j] >> shift) & 0x0f) - ml;
}

// Q5_K [d f16][dmin f16][scales 12][qh 32][qs 128]: as Q4_K with bit `sub` of qh[j] as bit 4.
TF_HD inline void q5_k(std::uint8_t const* b, int sub, float* out) {
  const auto [dl, ml] = k_scales_of(b, sub);
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* qs = b + 48 + (sub / 2) * 32;
  const int shift = 4 * (sub % 2);
  TF_QUANT_UNROLL
  for (int j = 0; j < 32; ++j) {
    const int q = ((qs[j] >> shift) & 0x0f) | (((qh[j] >> sub) & 1) << 4);
    out[j] = dl * static_cast<float>(q) - ml;
  }
}

// Q6_K [ql 128][qh 64][scales i8 16][d f16]: d * scale * (q6 - 32), per 16.
TF_HD inline void q6_k(std::uint8_t const* b, int sub, float* out) {
  const float d = f16_to_f32(read_u16(b + 208));
  const int quarter = sub % 4;  // which 32 of the chunk's 128-element half
  const std::uint8_t* ql = b + (sub / 4) * 64 + (quarter % 2) * 32;
  const std::uint8_t* qh = b + 128 + (sub / 4) * 32;
  const int lo_shift = 4 * (quarter / 2), hi_shift = 2 * quarter;
  TF_QUANT_UNROLL
  for (int half = 0; half < 2; ++half) {
    const float dl = d * static_cast<float>(static_cast<std::int8_t>(b[192 + 2 * sub + half]));
    TF_QUANT_UNROLL
    for (int l = 0; l < 16; ++l) {
      const int j = 16 * half + l;
      const int lo = (ql[j] >> lo_shift) & 0x0f;
      const int hi = (qh[j] >> hi_shift) & 3;
      out[j] = dl * static_cast<float>((lo | (hi << 4)) - 32);
    }
  }
}

// Q8_K [d f32][qs i8 256][bsums i16 16]: d * q.
TF_HD inline void q8_k(std::uint8_t const* b, int sub, float* out) {
  const float d = bits_to_f32(read_u32(b));
  const std::uint8_t* qs = b + 4 + sub * 32;
  TF_QUANT_UNROLL
  for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(static_cast<std::int8_t>(qs[j]));
}

}  // namespace quant_detail

/// Element i of a F32, F16 or BF16 row.
template <std::uint32_t Type>
TF_HD inline float float_element(std::uint8_t const* row, std::int64_t i) {
  static_assert(is_float_type(Type));
  if constexpr (Type == gguf_type::f32) return bits_to_f32(read_u32(row + 4 * i));
  if constexpr (Type == gguf_type::f16) return f16_to_f32(read_u16(row + 2 * i));
  if constexpr (Type == gguf_type::bf16) return bf16_to_f32(read_u16(row + 2 * i));
}

/// out[j] = element 32 chunk + j of `row` for j < len; len is 32 except for the last chunk of a
/// float row (a quantized row is whole blocks). out[len..32) are left alone.
template <std::uint32_t Type>
TF_HD inline void dequant_chunk(std::uint8_t const* row, std::int64_t chunk, int len, float* out) {
  static_assert(supported(Type));
  namespace q = quant_detail;
  if constexpr (is_float_type(Type)) {
    TF_QUANT_UNROLL
    for (int j = 0; j < chunk_elems; ++j)
      if (j < len) out[j] = float_element<Type>(row, chunk * chunk_elems + j);
  } else if constexpr (block_elems(Type) == 32) {
    std::uint8_t const* b = row + chunk * block_bytes(Type);
    if constexpr (Type == gguf_type::q4_0) q::q4_0(b, out);
    if constexpr (Type == gguf_type::q4_1) q::q4_1(b, out);
    if constexpr (Type == gguf_type::q5_0) q::q5_0(b, out);
    if constexpr (Type == gguf_type::q5_1) q::q5_1(b, out);
    if constexpr (Type == gguf_type::q8_0) q::q8_0(b, out);
  } else {
    std::uint8_t const* b = row + (chunk / 8) * block_bytes(Type);
    const int sub = static_cast<int>(chunk % 8);
    if constexpr (Type == gguf_type::q2_k) q::q2_k(b, sub, out);
    if constexpr (Type == gguf_type::q3_k) q::q3_k(b, sub, out);
    if constexpr (Type == gguf_type::q4_k) q::q4_k(b, sub, out);
    if constexpr (Type == gguf_type::q5_k) q::q5_k(b, sub, out);
    if constexpr (Type == gguf_type::q6_k) q::q6_k(b, sub, out);
    if constexpr (Type == gguf_type::q8_k) q::q8_k(b, sub, out);
  }
}

/// Calls f.template operator()<T>() with T = type as a compile-time value; false for an
/// unsupported type.
template <class F>
TF_HD inline bool with_type(std::uint32_t type, F&& f) {
  using namespace gguf_type;
  switch (type) {
    // clang-format off
    case f32: f.template operator()<f32>(); return true;
    case f16: f.template operator()<f16>(); return true;
    case bf16: f.template operator()<bf16>(); return true;
    case q4_0: f.template operator()<q4_0>(); return true;
    case q4_1: f.template operator()<q4_1>(); return true;
    case q5_0: f.template operator()<q5_0>(); return true;
    case q5_1: f.template operator()<q5_1>(); return true;
    case q8_0: f.template operator()<q8_0>(); return true;
    case q2_k: f.template operator()<q2_k>(); return true;
    case q3_k: f.template operator()<q3_k>(); return true;
    case q4_k: f.template operator()<q4_k>(); return true;
    case q5_k: f.template operator()<q5_k>(); return true;
    case q6_k: f.template operator()<q6_k>(); return true;
    case q8_k: f.template operator()<q8_k>(); return true;
    // clang-format on
    default:
      return false;
  }
}

/// dequant_chunk for a type known at run time; false (out untouched) for an unsupported type.
TF_HD inline bool dequant_chunk(std::uint32_t type, std::uint8_t const* row, std::int64_t chunk,
                                int len, float* out) {
  return with_type(type, [&]<std::uint32_t T>() { dequant_chunk<T>(row, chunk, len, out); });
}

/// out[0..32) = elements 32 chunk .. 32 chunk + 31 of a row of `type` (a K-quant chunk is one
/// eighth of a 256-element super-block); false (out untouched) for an unsupported type.
TF_HD inline bool dequant_chunk32(std::uint32_t type, std::uint8_t const* row, std::int64_t chunk,
                                  float* out) {
  return dequant_chunk(type, row, chunk, chunk_elems, out);
}

/// A lane's step over one chunk: acc = fma(w[j], x[j], acc) for j < len, in element order.
TF_HD inline float chunk_dot(float acc, float const* w, float const* x, int len) {
  TF_QUANT_UNROLL
  for (int j = 0; j < chunk_elems; ++j)
    if (j < len) acc = fused(w[j], x[j], acc);
  return acc;
}

/// One step of the warp's butterfly, for offset = 16, 8, 4, 2, 1: the lane's sum plus its
/// partner's (lane ^ offset). Every lane ends with the same total, as float addition commutes.
TF_HD inline float combine_lanes(float mine, float partner) {
  return mine + partner;
}

/// The 32 lane sums combined in the order the warp's butterfly combines them (lane 0's view).
inline float lane_total(float const* lane_sums /* [32] */) {
  float s[warp_lanes];
  for (int l = 0; l < warp_lanes; ++l) s[l] = lane_sums[l];
  for (int offset = warp_lanes / 2; offset > 0; offset /= 2)
    for (int l = 0; l < offset; ++l) s[l] = combine_lanes(s[l], s[l + offset]);
  return s[0];
}

/// dot(row, x) over `cols` elements of a `type` row, in exactly the kernel's order: lane l sums
/// chunks l, l + 32, ... with chunk_dot from +0, then lane_total. Throws nothing: an unsupported
/// type gives NaN.
inline float matvec_row_reference(std::uint32_t type, std::uint8_t const* row, float const* x,
                                  std::int64_t cols) {
  if (!supported(type)) return bits_to_f32(0x7fc00000u);
  float lane_sums[warp_lanes] = {};
  float w[chunk_elems];
  for (std::int64_t c = 0; c < chunk_count(cols); ++c) {
    const int len = chunk_length(cols, c);
    dequant_chunk(type, row, c, len, w);
    float& acc = lane_sums[c % warp_lanes];
    acc = chunk_dot(acc, w, x + c * chunk_elems, len);
  }
  return lane_total(lane_sums);
}

}  // namespace tf::kernels::cuda

#undef TF_QUANT_UNROLL
