#pragma once
/// The cuBLASLt path's per-element arithmetic, host and device: an f32 rounded to IEEE half or
/// bfloat16 (round to nearest even, as kernels/cpu/quant_blocks.hpp's fp32_to_fp16 and
/// fp32_to_bf16), and a weight row's 32-element chunk dequantized (quant.hpp) then rounded.
#include <kernels/cuda/launch.hpp>
#include <kernels/cuda/quant.hpp>
#include <kernels/portable/hd.hpp>

#include <bit>
#include <cstdint>

namespace tf::kernels::cuda {

/// The IEEE bits of `f`.
TF_HD inline std::uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}

/// f32 -> IEEE binary16 bits, round to nearest even; past 65504 rounds to infinity; a NaN stays a
/// quiet NaN with the top of its payload. Integer steps only, so device and host agree bit for bit.
TF_HD inline std::uint16_t f32_to_f16_bits(float f) {
  const std::uint32_t x = f32_to_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {  // a subnormal half, or zero
    if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t e = a >> 23;
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;
    std::uint32_t q = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  const std::uint32_t r = a - 0x38000000u;  // exponent bias 127 -> 15
  std::uint32_t q = r >> 13;
  const std::uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // a carry may reach the exponent
  return static_cast<std::uint16_t>(sign | q);
}

/// f32 -> bfloat16 bits, round to nearest even; a NaN stays a quiet NaN.
TF_HD inline std::uint16_t f32_to_bf16_bits(float f) {
  std::uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(x >> 16);
}

/// f32 -> the bits of `kind`.
TF_HD inline std::uint16_t round_to_half(float f, half_kind kind) {
  return kind == half_kind::f16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f);
}

/// out[j] = element 32 chunk + j of `row` (a row of Type) dequantized, then rounded to `kind`,
/// for j < len (32, or the rest of a float row's last chunk).
template <std::uint32_t Type>
TF_HD inline void dequant_chunk_half(std::uint8_t const* row, std::int64_t chunk, int len,
                                     half_kind kind, std::uint16_t* out) {
  float v[chunk_elems];
  dequant_chunk<Type>(row, chunk, len, v);
  for (int j = 0; j < chunk_elems; ++j)
    if (j < len) out[j] = round_to_half(v[j], kind);
}

/// dequant_chunk_half for a type known at run time; false (out untouched) for an unsupported type.
TF_HD inline bool dequant_chunk_half(std::uint32_t type, std::uint8_t const* row,
                                     std::int64_t chunk, int len, half_kind kind,
                                     std::uint16_t* out) {
  return with_type(type,
                   [&]<std::uint32_t T>() { dequant_chunk_half<T>(row, chunk, len, kind, out); });
}

}  // namespace tf::kernels::cuda
