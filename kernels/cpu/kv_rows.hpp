#pragma once
/// Row kernels of attention over the KV cache, for f32 and f16 keys and values: q . k, out += p *
/// v, f32 -> f16 rows and q scaled and rounded to f16; and GeGLU with f16-rounded input and output
/// (by a 64 Ki-entry table). The AVX2/F16C paths give the same bits as the scalar ones: each lane
/// does the scalar's operations (a multiply, then an add, never fused) and sums fold in the
/// scalar's fixed tree.
#include <kernels/cpu/cpu_features.hpp>
#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cpu/vec_dot_x86.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace tf::kernels::cpu::kv_rows {

namespace scalar {

inline float round_f16(float v) {
  return fp16_to_fp32(fp32_to_fp16(v));
}

inline void to_f16(const float* x, std::uint16_t* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

inline void scale_round(const float* x, float s, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = round_f16(x[i] * s);
}

inline float dot(const float* q, const std::uint16_t* k, std::int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += q[i + j] * fp16_to_fp32(k[i + j]);
  for (int j = 0; i < n; ++i, ++j) acc[j] += q[i] * fp16_to_fp32(k[i]);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

inline void axpy(float a, const std::uint16_t* v, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] += a * fp16_to_fp32(v[i]);
}

inline float dot(const float* q, const float* k, std::int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += q[i + j] * k[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += q[i] * k[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

inline void axpy(float a, const float* v, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] += a * v[i];
}

/// out[h * K + j] = dot(q[h], k[j], n) for H query heads and K keys.
template <int H, int K, class T>
void dot_heads(const float* const* q, const T* const* k, std::int64_t n, float* out) {
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < K; ++j) out[h * K + j] = dot(q[h], k[j], n);
}

/// For each of H heads: out[h] += a[h * K] v[0], then a[h * K + 1] v[1], .. (K values).
template <int H, int K, class T>
void axpy_heads(const float* a, const T* const* v, float* const* out, std::int64_t n) {
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < K; ++j) axpy(a[h * K + j], v[j], out[h], n);
}

}  // namespace scalar

#if TF_KERNELS_X86
namespace x86 {

// No "fma" in the target: the compiler must not fuse a multiply and an add the scalar keeps apart.
#define TF_F16_FN __attribute__((target("avx2,f16c"))) inline

TF_F16_FN __m256 load_f16(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

TF_F16_FN __m128i cvt_f16(__m256 v) {
  return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

TF_F16_FN void to_f16(const float* x, std::uint16_t* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), cvt_f16(_mm256_loadu_ps(x + i)));
  scalar::to_f16(x + i, y + i, n - i);
}

TF_F16_FN void scale_round(const float* x, float s, float* y, std::int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(cvt_f16(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs))));
  scalar::scale_round(x + i, s, y + i, n - i);
}

TF_F16_FN float fold8(__m256 acc) {
  // ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  const __m128 t = _mm_add_ps(s, _mm_shuffle_ps(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehl_ps(t, t)));
}

TF_F16_FN float dot(const float* q, const std::uint16_t* k, std::int64_t n) {
  if (n % 8 != 0) return scalar::dot(q, k, n);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n; i += 8)
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(q + i), load_f16(k + i)));
  return fold8(acc);
}

TF_F16_FN float dot(const float* q, const float* k, std::int64_t n) {
  if (n % 8 != 0) return scalar::dot(q, k, n);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n; i += 8)
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i)));
  return fold8(acc);
}

TF_F16_FN void axpy(float a, const float* v, float* out, std::int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i),
                                            _mm256_mul_ps(va, _mm256_loadu_ps(v + i))));
  scalar::axpy(a, v + i, out + i, n - i);
}

TF_F16_FN void axpy(float a, const std::uint16_t* v, float* out, std::int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(va, load_f16(v + i))));
  scalar::axpy(a, v + i, out + i, n - i);
}

TF_F16_FN __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}

TF_F16_FN __m256 load8(const std::uint16_t* p) {
  return load_f16(p);
}

// H heads against K keys: each key row converted once for all heads, H * K independent sums,
// each doing dot's steps.
template <int H, int K, class T>
TF_F16_FN void dot_heads(const float* const* q, const T* const* k, std::int64_t n, float* out) {
  static_assert(H * K <= 8, "dot_heads keeps H * K sums in registers: at most 8");
  if (n % 8 != 0) return scalar::dot_heads<H, K>(q, k, n, out);
  __m256 acc[H * K];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n; i += 8) {
    __m256 kv[K];
    for (int j = 0; j < K; ++j) kv[j] = load8(k[j] + i);
    for (int h = 0; h < H; ++h) {
      const __m256 qv = _mm256_loadu_ps(q[h] + i);
      for (int j = 0; j < K; ++j)
        acc[h * K + j] = _mm256_add_ps(acc[h * K + j], _mm256_mul_ps(qv, kv[j]));
    }
  }
  for (int r = 0; r < H * K; ++r) out[r] = fold8(acc[r]);
}

// H heads' outputs against K value rows: each value row converted once for all heads, each
// head's chunk loaded and stored once for its K adds, which run in axpy's order.
template <int H, int K, class T>
TF_F16_FN void axpy_heads(const float* a, const T* const* v, float* const* out, std::int64_t n) {
  static_assert(H * K <= 8, "axpy_heads keeps H * K weights in registers: at most 8");
  __m256 w[H * K];
  for (int r = 0; r < H * K; ++r) w[r] = _mm256_set1_ps(a[r]);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 o[H];
    for (int h = 0; h < H; ++h) o[h] = _mm256_loadu_ps(out[h] + i);
    for (int j = 0; j < K; ++j) {
      const __m256 vv = load8(v[j] + i);
      for (int h = 0; h < H; ++h) o[h] = _mm256_add_ps(o[h], _mm256_mul_ps(w[h * K + j], vv));
    }
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(out[h] + i, o[h]);
  }
  for (int h = 0; h < H; ++h)
    for (int j = 0; j < K; ++j) scalar::axpy(a[h * K + j], v[j] + i, out[h] + i, n - i);
}

#undef TF_F16_FN

}  // namespace x86
#endif

/// Asks for the n elements of a K or V row into L1: attention walks rows the head's weight
/// stream has pushed out of the caches, a page table apart, which the hardware prefetcher misses.
template <class T>
inline void prefetch_row(const T* row, std::int64_t n) {
#if TF_KERNELS_X86
  const auto* p = reinterpret_cast<const char*>(row);
  for (std::int64_t b = 0; b < n * static_cast<std::int64_t>(sizeof(T)); b += 64)
    _mm_prefetch(p + b, _MM_HINT_T0);
#else
  (void)row;
  (void)n;
#endif
}

/// y [n] = f16 bits of x [n], round to nearest even.
inline void to_f16(const float* x, std::uint16_t* y, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::to_f16(x, y, n);
#endif
  scalar::to_f16(x, y, n);
}

/// y [n] = x [n] * s rounded to f16 (and back to f32).
inline void scale_round(const float* x, float s, float* y, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::scale_round(x, s, y, n);
#endif
  scalar::scale_round(x, s, y, n);
}

/// q [n] . k [n] (f16) in 8 lanes, folded ((0+4)+(1+5))+((2+6)+(3+7)).
inline float dot(const float* q, const std::uint16_t* k, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::dot(q, k, n);
#endif
  return scalar::dot(q, k, n);
}

/// q [n] . k [n] in 8 lanes, folded ((0+4)+(1+5))+((2+6)+(3+7)).
inline float dot(const float* q, const float* k, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::dot(q, k, n);
#endif
  return scalar::dot(q, k, n);
}

/// out [n] += a * v [n] (f16).
inline void axpy(float a, const std::uint16_t* v, float* out, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::axpy(a, v, out, n);
#endif
  scalar::axpy(a, v, out, n);
}

/// out [n] += a * v [n].
inline void axpy(float a, const float* v, float* out, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::axpy(a, v, out, n);
#endif
  scalar::axpy(a, v, out, n);
}

/// out[h * K + j] = dot(q[h], k[j], n) for H query heads and K keys (f32 or f16), each with
/// dot's bits; H * K <= 8.
template <int H, int K, class T>
void dot_heads(const float* const* q, const T* const* k, std::int64_t n, float* out) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::dot_heads<H, K>(q, k, n, out);
#endif
  scalar::dot_heads<H, K>(q, k, n, out);
}

/// out[h] [n] += a[h * K + j] * v[j] [n] for j = 0..K-1 in turn, for each of H heads (f32 or
/// f16), with axpy's bits; H * K <= 8.
template <int H, int K, class T>
void axpy_heads(const float* a, const T* const* v, float* const* out, std::int64_t n) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::axpy_heads<H, K>(a, v, out, n);
#endif
  scalar::axpy_heads<H, K>(a, v, out, n);
}

/// GeGLU in f16: y = f16(gelu(f16(g))) * u, with gelu 0 below -10 and the identity above 10.
template <float (*Gelu)(float)>
class gelu_f16_table {
 public:
  gelu_f16_table() : table_(65536) {
    for (std::uint32_t h = 0; h < 65536; ++h)
      table_[h] = scalar::round_f16(Gelu(fp16_to_fp32(static_cast<std::uint16_t>(h))));
  }

  float operator()(float x) const {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return table_[fp32_to_fp16(x)];
  }

  /// y [n] = gelu(g [n]) * u [n]; may alias g.
  void mul(const float* g, const float* u, float* y, std::int64_t n) const {
#if TF_KERNELS_X86
    if (avx2_path()) return mul_x86(g, u, y, n);
#endif
    for (std::int64_t i = 0; i < n; ++i) y[i] = (*this)(g[i]) * u[i];
  }

 private:
#if TF_KERNELS_X86
  __attribute__((target("avx2,f16c"))) void mul_x86(const float* g, const float* u, float* y,
                                                    std::int64_t n) const {
    const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256i h = _mm256_cvtepu16_epi32(x86::cvt_f16(x));
      __m256 r = _mm256_i32gather_ps(table_.data(), h, 4);
      r = _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
      r = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), r);
      _mm256_storeu_ps(y + i, _mm256_mul_ps(r, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; ++i) y[i] = (*this)(g[i]) * u[i];
  }
#endif

  std::vector<float> table_;
};

}  // namespace tf::kernels::cpu::kv_rows
