#pragma once
/// Activation quantization: f32 rows to Q8_0 / Q8_1 (32-element formats) and Q8_K (K-quants).
#include <kernels/cpu/quant_blocks.hpp>

#include <cmath>
#include <cstdint>

namespace tf::kernels::cpu {

/// x [n] -> y [n / 32] Q8_0 blocks; d = max|x| / 127, q = x * (127 / max|x|) rounded half to
/// even, as llama.cpp quantizes its activations. n % 32 == 0.
inline void quantize_row_q8_0(const float* x, block_q8_0* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n / qk32; ++i) {
    const float* xb = x + i * qk32;
    float amax = 0.0f;
    for (int j = 0; j < qk32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < qk32; ++j)
      y[i].qs[j] = static_cast<std::int8_t>(std::nearbyint(xb[j] * id));
  }
}

/// x [n] -> y [n / 32]: quantize_row_q8_0's block, in block_q8_0u form. n % 32 == 0.
inline void quantize_row_q8_0u(const float* x, block_q8_0u* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n / qk32; ++i) {
    block_q8_0 b;
    quantize_row_q8_0(x + i * qk32, &b, qk32);
    for (float& d : y[i].d) d = fp16_to_fp32(b.d);
    for (int j = 0; j < qk32; ++j)
      y[i].qs[j] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(b.qs[j]) ^ 0x80u);
  }
}

/// x [n] -> y [n / 32] Q8_1 blocks (Q8_0 plus s = d * sum(q)). n % 32 == 0.
inline void quantize_row_q8_1(const float* x, block_q8_1* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n / qk32; ++i) {
    const float* xb = x + i * qk32;
    float amax = 0.0f;
    for (int j = 0; j < qk32; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < qk32; ++j) {
      const auto q = static_cast<std::int8_t>(std::nearbyint(xb[j] * id));
      y[i].qs[j] = q;
      sum += q;
    }
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

/// The element of largest magnitude in x [n], the first of equals (its sign kept).
inline float signed_max(const float* x, std::int64_t n) {
  float amax = 0.0f, max = 0.0f;
  for (std::int64_t j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

/// x [n] -> y [n / 256] Q8_K blocks as llama.cpp makes them: scale s = -127 / m for the element m
/// of largest magnitude, q = s x rounded half to even, d = 1 / s (so d and q carry the opposite
/// sign of m), bsums filled. n % 256 == 0.
inline void quantize_row_q8_k(const float* x, block_q8_k* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n / qk256; ++i) {
    const float* xb = x + i * qk256;
    const float max = signed_max(xb, qk256);
    if (max == 0.0f) {
      y[i] = block_q8_k{};
      continue;
    }
    const float iscale = -127.0f / max;
    y[i].d = 1.0f / iscale;
    for (int j = 0; j < qk256; ++j) {
      const float q = std::nearbyint(iscale * xb[j]);
      y[i].qs[j] = static_cast<std::int8_t>(q > 127.0f ? 127.0f : q);
    }
    for (int g = 0; g < qk256 / 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += y[i].qs[g * 16 + j];
      y[i].bsums[g] = static_cast<std::int16_t>(s);
    }
  }
}

}  // namespace tf::kernels::cpu
