#pragma once
/// AVX2 activation quantizers that give exactly the bytes of the scalar ones in quantize.hpp
/// (same max, same scale, rounding half to even), only faster.
#include <kernels/cpu/quantize.hpp>
#include <kernels/cpu/vec_dot_x86.hpp>

#include <cstdint>

#if TF_KERNELS_X86
namespace tf::kernels::cpu::avx2 {

#define TF_QX86_FN __attribute__((target("avx2,fma,f16c"))) inline

// 8 floats rounded half to even (the default rounding mode), as int32.
TF_QX86_FN __m256i round8(__m256 v) {
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

TF_QX86_FN float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 0x55));
  return _mm_cvtss_f32(m);
}

// max |x| over 32 floats at x (NaN ignored, as std::fmax does).
TF_QX86_FN float amax32(const float* x) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < 32; j += 8)
    m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask), m);
  return hmax8(m);
}

// 32 floats times id, rounded, saturated to int8, in order.
TF_QX86_FN __m256i quantize32(const float* x, float id) {
  const __m256 s = _mm256_set1_ps(id);
  const __m256i a = round8(_mm256_mul_ps(_mm256_loadu_ps(x), s));
  const __m256i b = round8(_mm256_mul_ps(_mm256_loadu_ps(x + 8), s));
  const __m256i c = round8(_mm256_mul_ps(_mm256_loadu_ps(x + 16), s));
  const __m256i d = round8(_mm256_mul_ps(_mm256_loadu_ps(x + 24), s));
  // The two packs interleave 128-bit lanes; the permute puts the 4-byte groups back in order.
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

TF_QX86_FN void quantize_row_q8_0(const float* x, block_q8_0* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n / qk32; ++i) {
    const float* xb = x + i * qk32;
    const float amax = amax32(xb);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = fp32_to_fp16(d);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), quantize32(xb, id));
  }
}

TF_QX86_FN void quantize_row_q8_0u(const float* x, block_q8_0u* y, std::int64_t n) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (std::int64_t i = 0; i < n / qk32; ++i) {
    const float* xb = x + i * qk32;
    const float amax = amax32(xb);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    _mm256_storeu_ps(y[i].d, _mm256_set1_ps(fp16_to_fp32(fp32_to_fp16(d))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs),
                        _mm256_xor_si256(quantize32(xb, id), bias));
  }
}

// As quantize_row_q8_0u, in block_q8_0c form for weight quants offset by 1 << offset_shift.
TF_QX86_FN void quantize_row_q8_0c(const float* x, block_q8_0c* y, std::int64_t n,
                                   int offset_shift) {
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  const __m128i shift = _mm_cvtsi32_si128(offset_shift);
  for (std::int64_t i = 0; i < n / qk32; ++i) {
    const float* xb = x + i * qk32;
    const float amax = amax32(xb);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    _mm256_storeu_ps(y[i].d, _mm256_set1_ps(fp16_to_fp32(fp32_to_fp16(d))));
    const __m256i q = quantize32(xb, id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), q);
    const __m256i sum4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].corr),
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_sll_epi32(sum4, shift)));
  }
}

TF_QX86_FN void quantize_row_q8_k(const float* x, block_q8_k* y, std::int64_t n) {
  const __m256i ones = _mm256_set1_epi8(1);
  for (std::int64_t i = 0; i < n / qk256; ++i) {
    const float* xb = x + i * qk256;
    float amax = 0.0f;
    for (int j = 0; j < qk256; j += 32) amax = std::fmax(amax, amax32(xb + j));
    if (amax == 0.0f) {
      y[i] = block_q8_k{};
      continue;
    }
    int first = 0;
    while (std::fabs(xb[first]) != amax) ++first;
    const float iscale = -127.0f / xb[first];
    y[i].d = 1.0f / iscale;
    for (int j = 0; j < qk256; j += 32) {
      const __m256i q = quantize32(xb + j, iscale);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), q);
      // Sums of 16 bytes: pairs, then quads, then the two 16-byte halves' quads folded.
      const __m256i quads = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), _mm256_set1_epi16(1));
      const __m256i pairs = _mm256_hadd_epi32(quads, quads);  // [a01 a23 a01 a23 | b01 b23 ..]
      const __m256i sums = _mm256_hadd_epi32(pairs, pairs);   // [a a a a | b b b b]
      y[i].bsums[j / 16] = static_cast<std::int16_t>(_mm256_extract_epi32(sums, 0));
      y[i].bsums[j / 16 + 1] = static_cast<std::int16_t>(_mm256_extract_epi32(sums, 4));
    }
  }
}

#undef TF_QX86_FN

}  // namespace tf::kernels::cpu::avx2
#endif
