#pragma once
/// AMX int8 tiles for the batched Q4_K matmul (prefill and scoring) on CPUs that have them: the
/// integer sums of a sub-block are exact in any order, so a tile's sums are the VNNI kernel's and
/// every result keeps the bits of the one-row dot. Detected at run time; TF_CPU_AMX=0 turns it off.
#include <kernels/cpu/cpu_features.hpp>
#include <kernels/cpu/vec_dot_x86.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#if TF_KERNELS_X86 && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TF_KERNELS_AMX 1
#else
#define TF_KERNELS_AMX 0
#endif

namespace tf::kernels::cpu {

/// Whether the CPU has AMX-TILE and AMX-INT8 and Linux lets this process use the tile data
/// (arch_prctl ARCH_REQ_XCOMP_PERM; without the grant the first tile instruction faults).
inline bool amx_int8_detected() {
#if TF_KERNELS_AMX
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = (d >> 24) & 1u, int8 = (d >> 25) & 1u;
  if (!tile || !int8) return false;
  constexpr long req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, req_xcomp_perm, xfeature_xtiledata) == 0;
#else
  return false;
#endif
}

/// Whether the batched Q4_K matmul takes AMX tiles: the AVX-512 path, AMX int8 detected and
/// granted, and TF_CPU_AMX not "0" (read once).
inline bool amx_tiles() {
  static const bool yes = [] {
    const char* env = std::getenv("TF_CPU_AMX");
    if (env && std::string_view(env) == "0") return false;
    return avx512_path() && amx_int8_detected();
  }();
  return yes;
}

namespace amx {
/// The AMX kernels write act-major: an activation row's results for 64 weight rows in a row.
inline constexpr std::int64_t out_stride = 64;
}  // namespace amx

#if TF_KERNELS_AMX
namespace amx {

// Every tile 16 rows of 64 bytes: tmm0-3 sums (16 weight rows x 16 activation rows, int32),
// tmm4-5 weights (u8), tmm6-7 activations (16 four-byte groups x 16 rows, s8).
struct alignas(64) tile_config {
  std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(tile_config) == 64, "ldtilecfg reads 64 bytes");

// The tile shapes are per thread; set once, kept for the thread's life.
inline void configure_tiles() {
  thread_local bool configured = false;
  if (configured) return;
  static const tile_config cfg;
  asm volatile("ldtilecfg %0" ::"m"(cfg));
  configured = true;
}

#define TF_AMX_LOAD(tmm, base, stride) \
  asm volatile("tileloadd (%0,%1,1), %%" tmm ::"r"(base), "r"(stride) : "memory")
#define TF_AMX_STORE(tmm, base) \
  asm volatile("tilestored %%" tmm ", (%0,%1,1)" ::"r"(base), "r"(std::int64_t{64}) : "memory")
// dst += A (u8) . B (s8), AT&T order: B, A, dst.
#define TF_AMX_DPBUSD(dst, a, b) asm volatile("tdpbusd %%" b ", %%" a ", %%" dst ::: "memory")

using avx512::block_q8_k_x16;

// A Q4_K super-block decoded for the tiles: each sub-block's 6-bit scale s = 8 s_hi + s_lo folded
// into its quants as two byte matrices q s_lo and q s_hi (each at most 15 * 7), so a tile sums a
// whole super-block at once: sum_j s_j (q_j . x_j) = (q s_lo) . x + 8 (q s_hi) . x, exactly the
// integer dot_q4_k_tile16 forms sub-block by sub-block. Then dot_q4_k_tiled's mins and scales.
struct alignas(64) block_q4_k_amx {
  std::uint8_t lo[256], hi[256];
  std::int32_t min_pairs[4];
  float d, dmin;
};

__attribute__((target("avx2,fma,f16c"))) inline void decode_q4_k_amx(const block_q4_k& b,
                                                                     block_q4_k_amx& out) {
  std::uint64_t sc, mn;
  avx512::k_scales_mins(b.scales, sc, mn);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int c = 0; c < 4; ++c) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
    const __m256i q[2] = {_mm256_and_si256(bits, m4),
                          _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4)};
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * c + h, s = static_cast<int>(sc >> (8 * j) & 0x3f);
      // Both bytes of a 16-bit lane times s at once: q s <= 105 never carries into the next byte.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.lo + 32 * j),
                          _mm256_mullo_epi16(q[h], _mm256_set1_epi16(static_cast<short>(s & 7))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.hi + 32 * j),
                          _mm256_mullo_epi16(q[h], _mm256_set1_epi16(static_cast<short>(s >> 3))));
    }
  }
  avx512::k_min_pairs(mn, out.min_pairs);
  out.d = avx512::h2f(b.d);
  out.dmin = avx512::h2f(b.dmin);
}

// GCC 12 reads the undefined upper halves inside its 512-bit intrinsics as uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Lane j of r[i] to lane i of r[j]: a 16 x 16 transpose of 32-bit values.
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))) inline void
transpose16(__m512i* r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + k]: rows 4i..4i+3 of column 4L + k in 128-bit lane L
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44);
    const __m512i x1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xee);
    r[k] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    r[8 + k] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + k] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
}

// Sixteen consecutive decoded Q4_K rows (nb super-blocks apart) against N sixteen-row tiles (nb
// apart), results act-major: activation row a's sixteen at out + a * out_stride. A super-block's
// integer sums come from two tile multiplies per 64 bytes (exact, as vpdpbusd's), and its float
// steps are dot_q4_k_tile16's, so every result is that kernel's (and the one-row dot's) bit for
// bit.
template <int N>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))) inline void
dot_q4_k_amx(const block_q4_k_amx* w, const block_q8_k_x16* x, std::int64_t nb, float* out) {
  static_assert(N == 1 || N == 2, "dot_q4_k_amx: the sums of two activation tiles fill tmm0-3");
  configure_tiles();
  const std::int64_t wstride = nb * static_cast<std::int64_t>(sizeof(block_q4_k_amx));
  constexpr std::int64_t xstride = 64;
  alignas(64) std::int32_t sums[2 * N][16][16];
  __m512 acc[N][16], acc_m[N][16];
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < 16; ++h) acc[n][h] = acc_m[n][h] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < nb; ++i) {
    asm volatile("tilezero %%tmm0\n\ttilezero %%tmm1" ::: "memory");
    if constexpr (N == 2) asm volatile("tilezero %%tmm2\n\ttilezero %%tmm3" ::: "memory");
    for (int c = 0; c < 4; ++c) {
      TF_AMX_LOAD("tmm4", w[i].lo + 64 * c, wstride);
      TF_AMX_LOAD("tmm5", w[i].hi + 64 * c, wstride);
      TF_AMX_LOAD("tmm6", x[i].qs[16 * c], xstride);
      TF_AMX_DPBUSD("tmm0", "tmm4", "tmm6");
      TF_AMX_DPBUSD("tmm1", "tmm5", "tmm6");
      if constexpr (N == 2) {
        TF_AMX_LOAD("tmm7", x[nb + i].qs[16 * c], xstride);
        TF_AMX_DPBUSD("tmm2", "tmm4", "tmm7");
        TF_AMX_DPBUSD("tmm3", "tmm5", "tmm7");
      }
    }
    TF_AMX_STORE("tmm0", sums[0]);
    TF_AMX_STORE("tmm1", sums[1]);
    if constexpr (N == 2) {
      TF_AMX_STORE("tmm2", sums[2]);
      TF_AMX_STORE("tmm3", sums[3]);
    }
    for (int n = 0; n < N; ++n) {
      const block_q8_k_x16& t = x[n * nb + i];
      const __m512 dx = _mm512_loadu_ps(t.d);
      __m512i pairs[4];
      for (int m = 0; m < 4; ++m) pairs[m] = _mm512_loadu_si512(t.sum_pairs[m]);
      for (int h = 0; h < 16; ++h) {
        const block_q4_k_amx& b = w[h * nb + i];
        const __m512i isum =
            _mm512_add_epi32(_mm512_load_si512(sums[2 * n][h]),
                             _mm512_slli_epi32(_mm512_load_si512(sums[2 * n + 1][h]), 3));
        const __m512i summ = avx512::k_min_sums(pairs, b.min_pairs);
        acc[n][h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                    _mm512_mul_ps(_mm512_set1_ps(b.d), dx), acc[n][h]);
        acc_m[n][h] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(b.dmin), dx),
                                      _mm512_cvtepi32_ps(summ), acc_m[n][h]);
      }
    }
  }
  for (int n = 0; n < N; ++n) {
    __m512i r[16];
    for (int h = 0; h < 16; ++h) r[h] = _mm512_castps_si512(_mm512_sub_ps(acc[n][h], acc_m[n][h]));
    transpose16(r);
    for (int a = 0; a < 16; ++a) _mm512_storeu_si512(out + (16 * n + a) * out_stride, r[a]);
  }
}
#pragma GCC diagnostic pop

#undef TF_AMX_LOAD
#undef TF_AMX_STORE
#undef TF_AMX_DPBUSD

}  // namespace amx
#endif

}  // namespace tf::kernels::cpu
