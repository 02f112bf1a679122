#pragma once
/// Vectorized row kernels over logits and activations: max, sum of exp (softmax normalizers over a
/// vocabulary), tanh softcapping and tanh-GELU. The AVX2 paths use exp by range reduction and a
/// degree-7 polynomial (about 1 ulp); each element is computed on its own, so results do not depend
/// on the batch or the thread count, only on the CPU path.
#include <kernels/cpu/cpu_features.hpp>
#include <kernels/cpu/vec_dot_x86.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tf::kernels::cpu::vec_math {

namespace scalar {

inline float max_of(const float* x, std::int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

inline double sum_exp(const float* x, std::int64_t n, float shift) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - shift);
  return s;
}

// sum_i x[i]^2 in double, each square rounded to f32 first as llama.cpp's RMSNorm does: element i
// into partial i % 16, the partials folded pairwise (the sequential sum's bits while the double
// partials stay exact, as they do unless the squares span more than 2^29).
inline double sum_squares(const float* x, std::int64_t n) {
  double p[16] = {};
  for (std::int64_t i = 0; i < n; ++i) p[i % 16] += static_cast<double>(x[i] * x[i]);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) p[j] += p[j + w];
  return p[0];
}

// x[i] = x0 c - x1 s and x[i + half] = x0 s + x1 c, each with one fma as llama.cpp's compiled
// RoPE rounds them.
inline void rope_rotate(float* x, std::int64_t half, const float* c, const float* s) {
  for (std::int64_t i = 0; i < half; ++i) {
    float const x0 = x[i], x1 = x[i + half];
    x[i] = std::fma(x0, c[i], -(x1 * s[i]));
    x[i + half] = std::fma(x0, s[i], x1 * c[i]);
  }
}

inline void softcap(float* x, std::int64_t n, float cap) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

// 0.5 x (1 + tanh(y)) written as x / (1 + e^{-2y}), which does not cancel for negative x.
inline float gelu_tanh(float x) {
  constexpr float k = -2.0f * 0.7978845608028654f;  // -2 sqrt(2 / pi)
  float const t = k * (x + 0.044715f * x * x * x);
  return x / (1.0f + std::exp(std::fmin(t, 80.0f)));
}

inline void gelu_tanh_mul(const float* g, const float* u, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(g[i]) * u[i];
}

}  // namespace scalar

#if TF_KERNELS_X86
namespace x86 {

#define TF_VM_FN __attribute__((target("avx2,fma"))) inline

// e^x for x in [-87, 88]: x = n ln2 + r with |r| <= ln2 / 2, e^r by Taylor to r^7, times 2^n.
// Below -87 the result is 0 (the callers only sum or divide by it).
TF_VM_FN __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split so n * ln2_hi is exact for |n| <= 128.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n in two steps, so n = 128 (x near 88) does not overflow the exponent field.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 =
      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  return _mm256_andnot_ps(under, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
}

// tanh(y) = 1 - 2 / (e^{2y} + 1), with the sign of y; |y| >= 10 is +-1 in f32.
TF_VM_FN __m256 tanh8(__m256 y) {
  const __m256 sign = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 a = _mm256_min_ps(_mm256_andnot_ps(sign, y), _mm256_set1_ps(10.0f));
  const __m256 e = exp8(_mm256_add_ps(a, a));
  const __m256 t =
      _mm256_sub_ps(_mm256_set1_ps(1.0f),
                    _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
  return _mm256_or_ps(t, sign);
}

// max_ps(v, m) keeps m where v is NaN, as std::max(m, v) does.
TF_VM_FN float max_of(const float* x, std::int64_t n) {
  __m256 m0 = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0;
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
  float m = scalar::max_of(lanes, 8);
  return std::max(m, scalar::max_of(x + i, n - i));
}

TF_VM_FN double sum_exp(const float* x, std::int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + scalar::sum_exp(x + i, n - i, shift);
}

// scalar::sum_squares's partials in four registers of four, so the same bits.
TF_VM_FN double sum_squares(const float* x, std::int64_t n) {
  __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                  _mm256_setzero_pd()};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int r = 0; r < 4; ++r) {
      const __m128 v = _mm_loadu_ps(x + i + 4 * r);
      a[r] = _mm256_add_pd(a[r], _mm256_cvtps_pd(_mm_mul_ps(v, v)));
    }
  alignas(32) double p[16];
  for (int r = 0; r < 4; ++r) _mm256_store_pd(p + 4 * r, a[r]);
  // The tail's bound says j < 16 outright, which GCC cannot prove from i < n for a constant n.
  for (int j = 0; j < 16 && i + j < n; ++j) p[j] += static_cast<double>(x[i + j] * x[i + j]);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) p[j] += p[j + w];
  return p[0];
}

TF_VM_FN void rope_rotate(float* x, std::int64_t half, const float* c, const float* s) {
  std::int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + half);
    const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
    _mm256_storeu_ps(x + i, _mm256_fmsub_ps(x0, cv, _mm256_mul_ps(x1, sv)));
    _mm256_storeu_ps(x + i + half, _mm256_fmadd_ps(x0, sv, _mm256_mul_ps(x1, cv)));
  }
  for (; i < half; ++i) {
    float const x0 = x[i], x1 = x[i + half];
    x[i] = std::fma(x0, c[i], -(x1 * s[i]));
    x[i + half] = std::fma(x0, s[i], x1 * c[i]);
  }
}

TF_VM_FN void softcap(float* x, std::int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_mul_ps(tanh8(_mm256_div_ps(_mm256_loadu_ps(x + i), c)), c));
  scalar::softcap(x + i, n - i, cap);
}

// gelu(x) = 0.5 x (1 + tanh(y)) = x / (1 + e^{-2y}), y = sqrt(2/pi) (x + 0.044715 x^3).
TF_VM_FN void gelu_tanh_mul(const float* g, const float* u, float* y, std::int64_t n) {
  const __m256 k = _mm256_set1_ps(-2.0f * 0.7978845608028654f), c = _mm256_set1_ps(0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(80.0f);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 t = _mm256_mul_ps(k, _mm256_fmadd_ps(c, x3, x));
    // t > 80: e^t is huge and gelu is -0; clamp so exp8 stays finite, then the divide gives ~0.
    const __m256 e = exp8(_mm256_min_ps(t, lim));
    _mm256_storeu_ps(
        y + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
  }
  scalar::gelu_tanh_mul(g + i, u + i, y + i, n - i);
}

#undef TF_VM_FN

}  // namespace x86
#endif

/// The largest of x [n], NaNs ignored (-inf for none).
inline float max_of(const float* x, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::max_of(x, n);
#endif
  return scalar::max_of(x, n);
}

/// sum_i e^(x[i] - shift), accumulated in double.
inline double sum_exp(const float* x, std::int64_t n, float shift) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::sum_exp(x, n, shift);
#endif
  return scalar::sum_exp(x, n, shift);
}

/// sum_i x[i]^2 in double, each square rounded to f32, in a fixed order of sixteen partials (the
/// same bits on every path).
inline double sum_squares(const float* x, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::sum_squares(x, n);
#endif
  return scalar::sum_squares(x, n);
}

/// NeoX RoPE's rotation of one head in place: pairs (i, i + half) by cos c [half] and sin s [half].
inline void rope_rotate(float* x, std::int64_t half, const float* c, const float* s) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::rope_rotate(x, half, c, s);
#endif
  scalar::rope_rotate(x, half, c, s);
}

/// x [n] = tanh(x / cap) * cap, in place.
inline void softcap(float* x, std::int64_t n, float cap) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::softcap(x, n, cap);
#endif
  scalar::softcap(x, n, cap);
}

/// y [n] = gelu_tanh(g [n]) * u [n]; may alias g.
inline void gelu_tanh_mul(const float* g, const float* u, float* y, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::gelu_tanh_mul(g, u, y, n);
#endif
  scalar::gelu_tanh_mul(g, u, y, n);
}

}  // namespace tf::kernels::cpu::vec_math
