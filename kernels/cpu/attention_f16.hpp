#pragma once
/// The steps of attention over an f16 KV cache in llama.cpp's CPU order, so that tf's scores,
/// probabilities and outputs carry its bits: q . k and p . v summed as ggml's f16 dot sums them
/// (four 8-lane fma accumulators over 32-element steps, folded in its tree), and the softmax's
/// exp by its range reduction and polynomial, summed in 8-key chunks. Keys sit in 32 accumulators
/// by their position, as the cache's cells do there.
#include <kernels/cpu/cpu_features.hpp>
#include <kernels/cpu/kv_rows.hpp>
#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cpu/vec_dot_x86.hpp>

#include <bit>
#include <cmath>
#include <cstdint>

namespace tf::kernels::cpu::attention_f16 {

/// Keys per accumulator cycle: key j adds into accumulator j % key_accumulators.
inline constexpr int key_accumulators = 32;

namespace scalar {

// e^x: x = n ln2 + b by a rounding shift, e^b by a degree-5 polynomial, 2^n by exponent bits;
// |n| > 126 scales in two steps and |n| > 192 saturates (to 0 or inf).
inline float exp(float x) {
  constexpr float shift = 0x1.8p23f;
  float const z = std::fma(x, 0x1.715476p+0f, shift);
  float const n = z - shift;
  float const b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  std::uint32_t const e = std::bit_cast<std::uint32_t>(z) << 23;
  float const k = std::bit_cast<float>(e + std::bit_cast<std::uint32_t>(1.0f));
  float const u = b * b;
  float const j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(k, j, k);
  std::uint32_t const g = n <= 0.0f ? 0x82000000u : 0u;
  float const s1 = std::bit_cast<float>(g + 0x7f000000u);
  float const s2 = std::bit_cast<float>(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7))
inline float sum8(const float* x) {
  float const v0 = x[0] + x[4], v1 = x[1] + x[5], v2 = x[2] + x[6], v3 = x[3] + x[7];
  return (v0 + v2) + (v1 + v3);
}

// The fold of the four 8-lane accumulators a[k * 8 + l]: lanes (a0 + a2) + (a1 + a3), then the
// halves added, then pairs.
inline float fold32(const float* a) {
  float s[8];
  for (int l = 0; l < 8; ++l) s[l] = (a[l] + a[16 + l]) + (a[8 + l] + a[24 + l]);
  float const t0 = s[0] + s[4], t1 = s[1] + s[5], t2 = s[2] + s[6], t3 = s[3] + s[7];
  return (t0 + t1) + (t2 + t3);
}

inline float dot(const float* q, const std::uint16_t* k, std::int64_t n) {
  float a[32] = {};
  std::int64_t const whole = n - n % 32;
  for (std::int64_t i = 0; i < whole; i += 32)
    for (int s = 0; s < 32; ++s) a[s] = std::fma(fp16_to_fp32(k[i + s]), q[i + s], a[s]);
  double sum = fold32(a);
  for (std::int64_t i = whole; i < n; ++i) sum += static_cast<double>(fp16_to_fp32(k[i]) * q[i]);
  return static_cast<float>(sum);
}

inline double exp_chunks(float* x, std::int64_t n, float mx) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; i += 8) {
    for (int l = 0; l < 8; ++l) x[i + l] = exp(x[i + l] - mx);
    sum += static_cast<double>(sum8(x + i));
  }
  return sum;
}

// The reference order, key by key: accumulator [n] += v [n] * p fused, and the 32 accumulators'
// fold.
inline void add_to_accumulator(float* accumulator, const std::uint16_t* v, float p,
                               std::int64_t n) {
  for (std::int64_t d = 0; d < n; ++d)
    accumulator[d] = std::fma(fp16_to_fp32(v[d]), p, accumulator[d]);
}

inline void fold_accumulators(const float* accumulators, float* out, std::int64_t n) {
  float a[32];
  for (std::int64_t d = 0; d < n; ++d) {
    for (int s = 0; s < 32; ++s) a[s] = accumulators[s * n + d];
    out[d] = fold32(a);
  }
}

template <int G>
void dot_heads(const float* const* q, const std::uint16_t* k, std::int64_t n, float* out) {
  for (int g = 0; g < G; ++g) out[g] = dot(q[g], k, n);
}

// Key i's accumulator is (first_acc + i) % 32; accumulator s sums its keys in order by fma from
// zero.
inline void weighted_sum(const std::uint16_t* const* v, const float* p, std::int64_t m,
                         int first_acc, std::int64_t n, float* out) {
  float a[32];
  for (std::int64_t d = 0; d < n; ++d) {
    for (int s = 0; s < 32; ++s) {
      float acc = 0.0f;
      for (std::int64_t i = (s - first_acc + 32) % 32; i < m; i += 32)
        acc = std::fma(fp16_to_fp32(v[i][d]), p[i], acc);
      a[s] = acc;
    }
    out[d] = fold32(a);
  }
}

}  // namespace scalar

#if TF_KERNELS_X86
namespace x86 {

#define TF_AF16_FN __attribute__((target("avx2,fma,f16c"))) inline

using kv_rows::x86::load_f16;

TF_AF16_FN __m256 exp8(__m256 x) {
  const __m256 shift = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
  const __m256 n = _mm256_sub_ps(z, shift);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k =
      _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
  const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
  const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  const __m256 near = _mm256_fmadd_ps(k, j, k);
  if (!_mm256_movemask_ps(big)) return near;
  const __m256i g =
      _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                       _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
  const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
  const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1);
  const __m256 r = _mm256_blendv_ps(near, scaled, big);
  return _mm256_blendv_ps(r, _mm256_mul_ps(s1, s1), huge);
}

TF_AF16_FN float sum8(__m256 x) {
  __m128 v = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

TF_AF16_FN __m256 fold32_lanes(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  return _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
}

TF_AF16_FN float fold32(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = fold32_lanes(a0, a1, a2, a3);
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 h = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

TF_AF16_FN double exp_chunks(float* x, std::int64_t n, float mx) {
  const __m256 m = _mm256_set1_ps(mx);
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    sum += static_cast<double>(sum8(e));
  }
  return sum;
}

// G heads against one key: its row converted once, each head's sums as dot's.
template <int G>
TF_AF16_FN void dot_heads(const float* const* q, const std::uint16_t* k, std::int64_t n,
                          float* out) {
  if (n % 32 != 0) return scalar::dot_heads<G>(q, k, n, out);  // the tail's order is scalar's
  __m256 a[G][4];
  for (auto& h : a)
    for (auto& v : h) v = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < n; i += 32)
    for (int s = 0; s < 4; ++s) {
      const __m256 kv = load_f16(k + i + 8 * s);
      for (int g = 0; g < G; ++g)
        a[g][s] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q[g] + i + 8 * s), a[g][s]);
    }
  for (int g = 0; g < G; ++g) out[g] = fold32(a[g][0], a[g][1], a[g][2], a[g][3]);
}

// Per 64 output elements: each accumulator's keys (32 apart) as eight fma chains, one per 8
// elements, in registers; the 32 accumulators' sums in an 8 KiB buffer, then folded per element.
TF_AF16_FN void weighted_sum(const std::uint16_t* const* v, const float* p, std::int64_t m,
                             int first_acc, std::int64_t n, float* out) {
  constexpr int W = 8;  // vectors of 8 elements per chain step
  if (n % (8 * W) != 0) return scalar::weighted_sum(v, p, m, first_acc, n, out);
  alignas(32) float buf[32 * 8 * W];
  for (std::int64_t d = 0; d < n; d += 8 * W) {
    for (int s = 0; s < 32; ++s) {
      __m256 acc[W];
      for (auto& a : acc) a = _mm256_setzero_ps();
      for (std::int64_t i = (s - first_acc + 32) % 32; i < m; i += 32) {
        const __m256 pv = _mm256_broadcast_ss(p + i);
        for (int c = 0; c < W; ++c)
          acc[c] = _mm256_fmadd_ps(load_f16(v[i] + d + 8 * c), pv, acc[c]);
      }
      for (int c = 0; c < W; ++c) _mm256_store_ps(buf + (s * W + c) * 8, acc[c]);
    }
    for (int c = 0; c < W; ++c) {
      auto accumulator = [&](int s) { return buf + (s * W + c) * 8; };
      __m256 part[8];
      for (int l = 0; l < 8; ++l)
        part[l] =
            fold32_lanes(_mm256_load_ps(accumulator(l)), _mm256_load_ps(accumulator(8 + l)),
                         _mm256_load_ps(accumulator(16 + l)), _mm256_load_ps(accumulator(24 + l)));
      const __m256 t0 = _mm256_add_ps(part[0], part[4]), t1 = _mm256_add_ps(part[1], part[5]);
      const __m256 t2 = _mm256_add_ps(part[2], part[6]), t3 = _mm256_add_ps(part[3], part[7]);
      _mm256_storeu_ps(out + d + 8 * c,
                       _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3)));
    }
  }
}

#undef TF_AF16_FN

}  // namespace x86
#endif

#if TF_KERNELS_X86
namespace x86_512 {

// GCC 12 reads the undefined upper halves inside its 512-bit intrinsics as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Only for avx512f CPUs (default_isa() == isa::avx512): each lane does x86's fma and adds.
#define TF_AF16_512_FN __attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) inline

TF_AF16_512_FN __m512 load_f16(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

TF_AF16_512_FN __m256 high_half(__m512 x) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
}

// x86::fold32 of the accumulators packed as lo = (a0 | a1), hi = (a2 | a3).
TF_AF16_512_FN float fold32(__m512 lo, __m512 hi) {
  const __m512 s = _mm512_add_ps(lo, hi);
  const __m256 f = _mm256_add_ps(_mm512_castps512_ps256(s), high_half(s));
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
  const __m128 h = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

// KP keys against G heads, n a multiple of 32: out[g * stride + j] has x86::dot_heads' bits, its
// four 8-lane accumulators paired in two 16-lane ones, each q load shared by the KP keys.
template <int G, int KP>
__attribute__((always_inline)) TF_AF16_512_FN void dot_pass(const float* const* q,
                                                            const std::uint16_t* const* k,
                                                            std::int64_t n, float* out,
                                                            std::int64_t stride) {
  __m512 lo[G][KP], hi[G][KP];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < KP; ++j) lo[g][j] = hi[g][j] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < n; i += 32) {
    __m512 kl[KP], kh[KP];
    for (int j = 0; j < KP; ++j) {
      kl[j] = load_f16(k[j] + i);
      kh[j] = load_f16(k[j] + i + 16);
    }
    for (int g = 0; g < G; ++g) {
      const __m512 ql = _mm512_loadu_ps(q[g] + i), qh = _mm512_loadu_ps(q[g] + i + 16);
      for (int j = 0; j < KP; ++j) {
        lo[g][j] = _mm512_fmadd_ps(kl[j], ql, lo[g][j]);
        hi[g][j] = _mm512_fmadd_ps(kh[j], qh, hi[g][j]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < KP; ++j) out[g * stride + j] = fold32(lo[g][j], hi[g][j]);
}

// nk keys against G heads, KP at a time in one call so that no pass leaves the registers.
template <int G, int KP>
TF_AF16_512_FN void dot_keys(const float* const* q, const std::uint16_t* const* k, std::int64_t nk,
                             std::int64_t n, float* out, std::int64_t stride) {
  std::int64_t j = 0;
  for (; j + KP <= nk; j += KP) dot_pass<G, KP>(q, k + j, n, out + j, stride);
  for (; j < nk; ++j) dot_pass<G, 1>(q, k + j, n, out + j, stride);
}

// Accumulator s's chains (keys from i0, 32 apart) for G heads over W 16-element vectors at d;
// `far`: the rows come from beyond L2, so each chain asks for its row two steps ahead.
template <int G, int W>
TF_AF16_512_FN void chains(const std::uint16_t* const* v, const float* const* p, std::int64_t i0,
                           std::int64_t m, std::int64_t d, bool far, __m512 (&acc)[G][W]) {
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < W; ++c) acc[g][c] = _mm512_setzero_ps();
  for (std::int64_t i = i0; i < m; i += 32) {
    if (far && i + 64 < m)
      for (int c = 0; c < W * 32; c += 64)
        _mm_prefetch(reinterpret_cast<const char*>(v[i + 64] + d) + c, _MM_HINT_T0);
    __m512 pv[G];
    for (int g = 0; g < G; ++g) pv[g] = _mm512_set1_ps(p[g][i]);
    for (int c = 0; c < W; ++c) {
      const __m512 x = load_f16(v[i] + d + 16 * c);
      for (int g = 0; g < G; ++g) acc[g][c] = _mm512_fmadd_ps(x, pv[g], acc[g][c]);
    }
  }
}

// G heads' weighted sums, each with x86::weighted_sum's bits (n a multiple of 16 W): every V
// vector converted once for the G heads, the 32 accumulators folded as they are made.
template <int G, int W>
TF_AF16_512_FN void weighted_sum_heads(const std::uint16_t* const* v, const float* const* p,
                                       std::int64_t m, int first_acc, std::int64_t n,
                                       float* const* out) {
  // x: a_l + a_(l+16), y: a_(l+8) + a_(l+24), t[r]: s_r + s_(r+4) of scalar::fold32.
  __m512 x[G][W], y[G][W], t[4][G][W], acc[G][W];
  auto first = [&](int s) { return static_cast<std::int64_t>((s - first_acc + 32) % 32); };
  bool const far = m * n > (std::int64_t{1} << 18);  // the rows' f16 values past 512 KiB
  for (std::int64_t d = 0; d < n; d += 16 * W) {
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < 2; ++half) {
        int const l = r + 4 * half;
        chains<G, W>(v, p, first(l), m, d, far, x);
        chains<G, W>(v, p, first(l + 16), m, d, far, acc);
        for (int g = 0; g < G; ++g)
          for (int c = 0; c < W; ++c) x[g][c] = _mm512_add_ps(x[g][c], acc[g][c]);
        chains<G, W>(v, p, first(l + 8), m, d, far, y);
        chains<G, W>(v, p, first(l + 24), m, d, far, acc);
        for (int g = 0; g < G; ++g)
          for (int c = 0; c < W; ++c) {
            const __m512 sl = _mm512_add_ps(x[g][c], _mm512_add_ps(y[g][c], acc[g][c]));
            t[r][g][c] = half == 0 ? sl : _mm512_add_ps(t[r][g][c], sl);
          }
      }
    for (int g = 0; g < G; ++g)
      for (int c = 0; c < W; ++c)
        _mm512_storeu_ps(out[g] + d + 16 * c, _mm512_add_ps(_mm512_add_ps(t[0][g][c], t[1][g][c]),
                                                            _mm512_add_ps(t[2][g][c], t[3][g][c])));
  }
}

#undef TF_AF16_512_FN
#pragma GCC diagnostic pop

}  // namespace x86_512
#endif

/// x [n] = e^(x - mx) in place, n a multiple of 8; returns their sum, 8-key chunks in double.
inline double exp_chunks(float* x, std::int64_t n, float mx) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::exp_chunks(x, n, mx);
#endif
  return scalar::exp_chunks(x, n, mx);
}

/// out[g] = dot(q[g], k, n) for G query heads, the key row read once.
template <int G>
inline void dot_heads(const float* const* q, const std::uint16_t* k, std::int64_t n, float* out) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::dot_heads<G>(q, k, n, out);
#endif
  scalar::dot_heads<G>(q, k, n, out);
}

/// q [n] . k [n] (f16) in ggml's f16 dot order; q holds f16-rounded values.
inline float dot(const float* q, const std::uint16_t* k, std::int64_t n) {
  float out;
  dot_heads<1>(&q, k, n, &out);
  return out;
}

/// out [n] = sum_i p[i] v[i] over m value rows in ggml's f16 dot order over the keys: row i in
/// accumulator (first_acc + i) % key_accumulators, each accumulator's rows by fma from zero in
/// order, the accumulators folded as fold32 folds four accumulators (the bits of
/// scalar::add_to_accumulator, then scalar::fold_accumulators).
inline void weighted_sum(const std::uint16_t* const* v, const float* p, std::int64_t m,
                         int first_acc, std::int64_t n, float* out) {
#if TF_KERNELS_X86
  if (avx2_path()) return x86::weighted_sum(v, p, m, first_acc, n, out);
#endif
  scalar::weighted_sum(v, p, m, first_acc, n, out);
}

/// out[g * stride + j] = dot(q[g], k[j], n) for G query heads and nk keys (KP at a time where
/// the AVX-512 path takes them).
template <int G, int KP>
inline void dot_keys(const float* const* q, const std::uint16_t* const* k, std::int64_t nk,
                     std::int64_t n, float* out, std::int64_t stride) {
#if TF_KERNELS_X86
  if (n % 32 == 0 && avx512_path()) return x86_512::dot_keys<G, KP>(q, k, nk, n, out, stride);
#endif
  for (std::int64_t j = 0; j < nk; ++j) {
    float o[G];
    dot_heads<G>(q, k[j], n, o);
    for (int g = 0; g < G; ++g) out[g * stride + j] = o[g];
  }
}

/// weighted_sum(v, p[g], m, first_acc, n, out[g]) for G heads, each value row read once.
template <int G>
inline void weighted_sum_heads(const std::uint16_t* const* v, const float* const* p, std::int64_t m,
                               int first_acc, std::int64_t n, float* const* out) {
#if TF_KERNELS_X86
  // 16 accumulators of 16 lanes: four vectors for four heads, eight for two, sixteen for one.
  constexpr int W = 16 / G;
  if (n % (16 * W) == 0 && avx512_path())
    return x86_512::weighted_sum_heads<G, W>(v, p, m, first_acc, n, out);
#endif
  for (int g = 0; g < G; ++g) weighted_sum(v, p[g], m, first_acc, n, out[g]);
}

}  // namespace tf::kernels::cpu::attention_f16
