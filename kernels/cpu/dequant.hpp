#pragma once
/// Reference dequantization of one row of any supported GGUF type to f32, bit-exact with ggml/gguf.
#include <kernels/cpu/quant_blocks.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>

#include <cstdint>
#include <cstring>

namespace tf::kernels::cpu {

namespace detail {

// Keeps a product in a register so that `p + c` is never fused into an FMA (ggml rounds twice).
inline float rounded(float p) {
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+x"(p));
#endif
  return p;
}

template <class Block>
inline Block load_block(const std::uint8_t* src) {
  Block b;
  std::memcpy(&b, src, sizeof(Block));  // any alignment: GGUF only promises 32 for tensor starts
  return b;
}

inline void dequant(const block_q4_0& b, float* y /* [32] */) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < qk32 / 2; ++j) {
    y[j] = d * static_cast<float>((b.qs[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((b.qs[j] >> 4) - 8);
  }
}

inline void dequant(const block_q4_1& b, float* y /* [32] */) {
  const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
  for (int j = 0; j < qk32 / 2; ++j) {
    y[j] = rounded(d * static_cast<float>(b.qs[j] & 0x0f)) + m;
    y[j + 16] = rounded(d * static_cast<float>(b.qs[j] >> 4)) + m;
  }
}

inline std::uint32_t qh_bits(const std::uint8_t* qh /* [4] */) {
  return static_cast<std::uint32_t>(qh[0]) | (static_cast<std::uint32_t>(qh[1]) << 8) |
         (static_cast<std::uint32_t>(qh[2]) << 16) | (static_cast<std::uint32_t>(qh[3]) << 24);
}

inline void dequant(const block_q5_0& b, float* y /* [32] */) {
  const float d = fp16_to_fp32(b.d);
  const std::uint32_t qh = qh_bits(b.qh);
  for (int j = 0; j < qk32 / 2; ++j) {
    int lo = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

inline void dequant(const block_q5_1& b, float* y /* [32] */) {
  const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
  const std::uint32_t qh = qh_bits(b.qh);
  for (int j = 0; j < qk32 / 2; ++j) {
    int lo = (b.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    int hi = (b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = rounded(d * static_cast<float>(lo)) + m;
    y[j + 16] = rounded(d * static_cast<float>(hi)) + m;
  }
}

inline void dequant(const block_q8_0& b, float* y /* [32] */) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < qk32; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

inline void dequant(const block_q8_1& b, float* y /* [32] */) {
  const float d = fp16_to_fp32(b.d);
  for (int j = 0; j < qk32; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

inline void dequant(const block_q2_k& b, float* y /* [256] */) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int i = 0; i < qk256; ++i) {
    const int half = i / 128, shift = 2 * ((i % 128) / 32), l = i % 32;
    const std::uint8_t sc = b.scales[i / 16];
    const float dl = d * static_cast<float>(sc & 0x0f);
    const float ml = dmin * static_cast<float>(sc >> 4);
    const int q = (b.qs[half * 32 + l] >> shift) & 3;
    y[i] = rounded(dl * static_cast<float>(q)) - ml;
  }
}

inline void dequant(const block_q3_k& b, float* y /* [256] */) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < qk256; ++i) {
    const int half = i / 128, j = (i % 128) / 32, l = i % 32;
    const float dl = d * static_cast<float>(q3_k_scale(b.scales, i / 16));
    const int low = (b.qs[half * 32 + l] >> (2 * j)) & 3;
    const int hbit = (b.hmask[l] >> (half * 4 + j)) & 1;
    y[i] = dl * static_cast<float>(low - (hbit ? 0 : 4));
  }
}

inline void dequant(const block_q4_k& b, float* y /* [256] */) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int sub = 0; sub < 8; ++sub) {
    std::uint8_t sc = 0, m = 0;
    k_scale_min(b.scales, sub, sc, m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    const int chunk = sub / 2, shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = (b.qs[chunk * 32 + l] >> shift) & 0x0f;
      y[sub * 32 + l] = rounded(dl * static_cast<float>(q)) - ml;
    }
  }
}

inline void dequant(const block_q5_k& b, float* y /* [256] */) {
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int sub = 0; sub < 8; ++sub) {
    std::uint8_t sc = 0, m = 0;
    k_scale_min(b.scales, sub, sc, m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    const int chunk = sub / 2, shift = 4 * (sub % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = ((b.qs[chunk * 32 + l] >> shift) & 0x0f) | (((b.qh[l] >> sub) & 1) << 4);
      y[sub * 32 + l] = rounded(dl * static_cast<float>(q)) - ml;
    }
  }
}

inline void dequant(const block_q6_k& b, float* y /* [256] */) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < qk256; ++i) {
    const int half = i / 128, r = i % 128;
    const int lo = (b.ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
    const int hi = (b.qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
    const float dl = d * static_cast<float>(b.scales[i / 16]);
    y[i] = dl * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

inline void dequant(const block_q8_k& b, float* y /* [256] */) {
  for (int i = 0; i < qk256; ++i) y[i] = b.d * static_cast<float>(b.qs[i]);
}

template <class Block>
inline void dequant_blocks(const std::uint8_t* src, float* dst, std::int64_t n_blocks,
                           int block_elems) {
  for (std::int64_t i = 0; i < n_blocks; ++i)
    dequant(load_block<Block>(src + i * static_cast<std::int64_t>(sizeof(Block))),
            dst + i * block_elems);
}

}  // namespace detail

/// Dequantizes `n` elements of type `t` at `src` (any alignment) into `dst` [n] (f32).
/// Throws tf::error for a type without dequantization or `n` not a whole number of blocks.
inline void dequantize_row(tf::model::tensor_type t, const void* src, float* dst, std::int64_t n) {
  using tf::model::tensor_type;
  const auto tr = tf::model::traits_of(t);
  if (n < 0 || n % tr.block_elems != 0)
    throw tf::error(
        "tf::kernels::cpu::dequantize_row: {} elements of {} is not a whole number of "
        "{}-element blocks",
        n, tr.name, tr.block_elems);
  const auto* s = static_cast<const std::uint8_t*>(src);
  const std::int64_t nb = n / tr.block_elems;
  switch (t) {
    case tensor_type::f32:
      if (n > 0) std::memcpy(dst, s, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case tensor_type::f16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = fp16_to_fp32(h);
      }
      return;
    case tensor_type::bf16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = bf16_to_fp32(h);
      }
      return;
    case tensor_type::q4_0:
      return detail::dequant_blocks<block_q4_0>(s, dst, nb, qk32);
    case tensor_type::q4_1:
      return detail::dequant_blocks<block_q4_1>(s, dst, nb, qk32);
    case tensor_type::q5_0:
      return detail::dequant_blocks<block_q5_0>(s, dst, nb, qk32);
    case tensor_type::q5_1:
      return detail::dequant_blocks<block_q5_1>(s, dst, nb, qk32);
    case tensor_type::q8_0:
      return detail::dequant_blocks<block_q8_0>(s, dst, nb, qk32);
    case tensor_type::q8_1:
      return detail::dequant_blocks<block_q8_1>(s, dst, nb, qk32);
    case tensor_type::q2_k:
      return detail::dequant_blocks<block_q2_k>(s, dst, nb, qk256);
    case tensor_type::q3_k:
      return detail::dequant_blocks<block_q3_k>(s, dst, nb, qk256);
    case tensor_type::q4_k:
      return detail::dequant_blocks<block_q4_k>(s, dst, nb, qk256);
    case tensor_type::q5_k:
      return detail::dequant_blocks<block_q5_k>(s, dst, nb, qk256);
    case tensor_type::q6_k:
      return detail::dequant_blocks<block_q6_k>(s, dst, nb, qk256);
    case tensor_type::q8_k:
      return detail::dequant_blocks<block_q8_k>(s, dst, nb, qk256);
    default:
      break;
  }
  throw tf::error(
      "tf::kernels::cpu::dequantize_row: no dequantization for type {} ({}); supported: F32, F16, "
      "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K",
      tr.name, static_cast<std::uint32_t>(t));
}

}  // namespace tf::kernels::cpu
