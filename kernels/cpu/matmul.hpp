#pragma once
/// Quantized mat-vec / mat-mat: y[b, n] = sum_k x[b, k] * W[n, k], W rows in any GGUF quant type.
/// x is quantized once per call (Q8_0, Q8_1 or Q8_K by weight type); each output element has the
/// bits of one call of one dot routine (the sixteen-row tile kernels keep each row's integer sums
/// and float steps), so results do not depend on the thread count or on the batch size.
#include <kernels/cpu/amx_tiles.hpp>
#include <kernels/cpu/cpu_features.hpp>
#include <kernels/cpu/quantize.hpp>
#include <kernels/cpu/quantize_x86.hpp>
#include <kernels/cpu/rows8.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <kernels/cpu/vec_dot.hpp>
#include <kernels/cpu/vec_dot_x86.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

namespace tf::kernels::cpu {

/// Inputs of matmul; rows of W and of x are contiguous.
struct matmul_params {
  tf::model::tensor_type w_type = tf::model::tensor_type::f32;
  const void* w = nullptr;   // [n, k] in w_type (row_bytes(w_type, k) bytes per row)
  const float* x = nullptr;  // [b, k]
  float* y = nullptr;        // [b, n]
  std::int64_t n = 0;        // output features (rows of W)
  std::int64_t k = 0;        // input features
  std::int64_t b = 1;        // activation rows
  weight_layout layout = weight_layout::rows;
};

/// The activation format a weight type is dotted against.
enum class act_format { f32, q8_0, q8_1, q8_k };

/// Which activation format `t` uses; throws for a type matmul does not support.
inline act_format act_format_of(tf::model::tensor_type t) {
  using tf::model::tensor_type;
  switch (t) {
    case tensor_type::f32:
    case tensor_type::f16:
    case tensor_type::bf16:
      return act_format::f32;
    case tensor_type::q4_0:
    case tensor_type::q5_0:
    case tensor_type::q8_0:
    case tensor_type::q8_1:
      return act_format::q8_0;
    case tensor_type::q4_1:
    case tensor_type::q5_1:
      return act_format::q8_1;
    case tensor_type::q2_k:
    case tensor_type::q3_k:
    case tensor_type::q4_k:
    case tensor_type::q5_k:
    case tensor_type::q6_k:
    case tensor_type::q8_k:
      return act_format::q8_k;
    default:
      break;
  }
  throw tf::error("tf::kernels::cpu::matmul: no dot product for weight type {} ({})",
                  tf::model::traits_of(t).name, static_cast<std::uint32_t>(t));
}

namespace detail {

// One weight row against `nr` activation rows x[0..nr), results to out[0..nr).
using dot_fn = void (*)(const void* w, const void* const* x, std::int64_t n, std::int64_t nr,
                        float* out);

template <class W, class X, float (*F)(const W*, const X*, std::int64_t)>
void rows_one_by_one(const void* w, const void* const* x, std::int64_t n, std::int64_t nr,
                     float* out) {
  for (std::int64_t r = 0; r < nr; ++r)
    out[r] = F(static_cast<const W*>(w), static_cast<const X*>(x[r]), n);
}

#if TF_KERNELS_X86
// Four activation rows per pass over the weight row; the rest one at a time (same arithmetic).
template <class W, class X, void (*F4)(const W*, const X* const*, std::int64_t, float*),
          void (*F1)(const W*, const X* const*, std::int64_t, float*)>
void rows_by_four(const void* w, const void* const* x, std::int64_t n, std::int64_t nr,
                  float* out) {
  const auto* wb = static_cast<const W*>(w);
  const auto* const* xb = reinterpret_cast<const X* const*>(x);
  std::int64_t r = 0;
  for (; r + 4 <= nr; r += 4) F4(wb, xb + r, n, out + r);
  for (; r < nr; ++r) F1(wb, xb + r, n, out + r);
}
#define TF_ROWS4(ns, fn, W, X) rows_by_four<W, X, ns::fn<4>, ns::fn<1>>

// Eight rows per pass, then four, then one (same arithmetic for every row).
template <class W, class X, void (*F8)(const W*, const X* const*, std::int64_t, float*),
          void (*F4)(const W*, const X* const*, std::int64_t, float*),
          void (*F1)(const W*, const X* const*, std::int64_t, float*)>
void rows_by_eight(const void* w, const void* const* x, std::int64_t n, std::int64_t nr,
                   float* out) {
  const auto* wb = static_cast<const W*>(w);
  const auto* const* xb = reinterpret_cast<const X* const*>(x);
  std::int64_t r = 0;
  for (; r + 8 <= nr; r += 8) F8(wb, xb + r, n, out + r);
  rows_by_four<W, X, F4, F1>(w, x + r, n, nr - r, out + r);
}
#define TF_ROWS8(ns, fn, W, X) rows_by_eight<W, X, ns::fn<8>, ns::fn<4>, ns::fn<1>>

// Sixteen rows per pass (AVX-512 has the registers for sixteen accumulators), then 8, 4, 1.
template <class W, class X, void (*F16)(const W*, const X* const*, std::int64_t, float*),
          void (*F8)(const W*, const X* const*, std::int64_t, float*),
          void (*F4)(const W*, const X* const*, std::int64_t, float*),
          void (*F1)(const W*, const X* const*, std::int64_t, float*)>
void rows_by_sixteen(const void* w, const void* const* x, std::int64_t n, std::int64_t nr,
                     float* out) {
  const auto* wb = static_cast<const W*>(w);
  const auto* const* xb = reinterpret_cast<const X* const*>(x);
  std::int64_t r = 0;
  for (; r + 16 <= nr; r += 16) F16(wb, xb + r, n, out + r);
  rows_by_eight<W, X, F8, F4, F1>(w, x + r, n, nr - r, out + r);
}
#define TF_ROWS16_0U(W)                                                        \
  rows_by_sixteen<W, block_q8_0u, avx512::dot_0u<16, W>, avx512::dot_0u<8, W>, \
                  avx512::dot_0u<4, W>, avx512::dot_0u<1, W>>

// `width` (16 on AVX-512, 8 on AVX2) activation rows against decoded weight rows: weight rows are
// decoded once per pass into `decoded` bytes per block, activation rows are tiled `width` at a
// time into `tiled` bytes per block, and `dot` gives one weight row's `width` results (each with
// the bits of the row-major dot routine for that row).
struct tiled_kernel {
  void (*decode)(const std::uint8_t* w, std::uint8_t* out, std::int64_t nb) = nullptr;
  void (*tile)(const std::uint8_t* x, std::int64_t arb, std::int64_t nb,
               std::uint8_t* out) = nullptr;
  using dot_fn = void (*)(const std::uint8_t* w, const std::uint8_t* x, std::int64_t nb,
                          float* out);
  dot_fn dot = nullptr;   // one weight row, out [width]
  dot_fn dots = nullptr;  // `rows` consecutive weight rows, out [rows][width]
  int rows = 1;
  std::int64_t decoded = 0, tiled = 0;
  int width = 16;
  // `rows` weight rows against two consecutive tiles, out [rows][2 width]; or null.
  dot_fn dots_pair = nullptr;
  // Weight rows go `rows` at a time only, the last run topped up with zero rows (no `dot`), and
  // `dots` writes act-major: activation row a's results at out + a * amx::out_stride.
  bool amx = false;
};

// A weight row of `nb` blocks W decoded block by block into D.
template <class W, class D, void (*Decode)(const W&, D&)>
void decode_rows(const std::uint8_t* w, std::uint8_t* out, std::int64_t nb) {
  const W* b = reinterpret_cast<const W*>(w);
  D* o = reinterpret_cast<D*>(out);
  for (std::int64_t i = 0; i < nb; ++i) Decode(b[i], o[i]);
}

// A tile kernel over the byte pointers tiled_kernel hands out.
template <class D, class X, void (*Kernel)(const D*, const X*, std::int64_t, float*)>
void dot_tiles(const std::uint8_t* w, const std::uint8_t* x, std::int64_t nb, float* out) {
  Kernel(reinterpret_cast<const D*>(w), reinterpret_cast<const X*>(x), nb, out);
}

// Two int16 values as one int32 lane, lo in the low half.
inline std::int32_t int16_pair(std::int32_t lo, std::int32_t hi) {
  return static_cast<std::int32_t>(static_cast<std::uint16_t>(lo) |
                                   static_cast<std::uint32_t>(static_cast<std::uint16_t>(hi))
                                       << 16);
}

inline void tile_rows_0u(const std::uint8_t* x, std::int64_t arb, std::int64_t nb,
                         std::uint8_t* out) {
  auto* tiles = reinterpret_cast<avx512::block_q8_0u_x16*>(out);
  for (int r = 0; r < 16; ++r) {
    const auto* xb = reinterpret_cast<const block_q8_0u*>(x + r * arb);
    for (std::int64_t i = 0; i < nb; ++i) {
      tiles[i].d[r] = xb[i].d[0];
      for (int l = 0; l < 8; ++l) std::memcpy(tiles[i].qs[l][r], xb[i].qs + 4 * l, 4);
    }
  }
}

// Sixteen block_q8_k rows into tiles T: scales, the rows' activation sums as Pairs int16 pairs
// (pair m: the sums of its two halves of 256 / Pairs elements), then the bytes four at a time.
template <class T, int Pairs>
void tile_rows_q8_k(const std::uint8_t* x, std::int64_t arb, std::int64_t nb, std::uint8_t* out) {
  constexpr int per = 16 / (2 * Pairs);  // bsums (16 elements each) per half of a pair
  auto* tiles = reinterpret_cast<T*>(out);
  for (int r = 0; r < 16; ++r) {
    const auto* xb = reinterpret_cast<const block_q8_k*>(x + r * arb);
    for (std::int64_t i = 0; i < nb; ++i) {
      tiles[i].d[r] = xb[i].d;
      auto half = [&](int h) {
        std::int32_t sum = 0;
        for (int k = 0; k < per; ++k) sum += xb[i].bsums[h * per + k];
        return sum;
      };
      for (int m = 0; m < Pairs; ++m)
        tiles[i].sum_pairs[m][r] = int16_pair(half(2 * m), half(2 * m + 1));
      for (int g = 0; g < 64; ++g) std::memcpy(tiles[i].qs[g][r], xb[i].qs + 4 * g, 4);
    }
  }
}

// Eight block_q8_0 rows into avx2::block_q8_0_x8 tiles (scales widened to f32).
inline void tile_rows_q8_0x8(const std::uint8_t* x, std::int64_t arb, std::int64_t nb,
                             std::uint8_t* out) {
  auto* tiles = reinterpret_cast<avx2::block_q8_0_x8*>(out);
  for (int r = 0; r < 8; ++r) {
    const auto* xb = reinterpret_cast<const block_q8_0*>(x + r * arb);
    for (std::int64_t i = 0; i < nb; ++i) {
      tiles[i].d[r] = fp16_to_fp32(xb[i].d);
      for (int l = 0; l < 8; ++l) std::memcpy(tiles[i].qs[l][r], xb[i].qs + 4 * l, 4);
    }
  }
}

// Eight block_q8_k rows into avx2::block_q8_k_x8 tiles.
inline void tile_rows_q8_kx8(const std::uint8_t* x, std::int64_t arb, std::int64_t nb,
                             std::uint8_t* out) {
  auto* tiles = reinterpret_cast<avx2::block_q8_k_x8*>(out);
  for (int r = 0; r < 8; ++r) {
    const auto* xb = reinterpret_cast<const block_q8_k*>(x + r * arb);
    for (std::int64_t i = 0; i < nb; ++i) {
      tiles[i].d[r] = xb[i].d;
      for (int j = 0; j < 8; ++j) tiles[i].sums[j][r] = xb[i].bsums[2 * j] + xb[i].bsums[2 * j + 1];
      for (int g = 0; g < 64; ++g) std::memcpy(tiles[i].qs[g][r], xb[i].qs + 4 * g, 4);
    }
  }
}

// Eight block_q8_k rows into avx2::block_q8_k_q6_x8 tiles (16-element sums in int16 pairs).
inline void tile_rows_q8_k_q6x8(const std::uint8_t* x, std::int64_t arb, std::int64_t nb,
                                std::uint8_t* out) {
  auto* tiles = reinterpret_cast<avx2::block_q8_k_q6_x8*>(out);
  for (int r = 0; r < 8; ++r) {
    const auto* xb = reinterpret_cast<const block_q8_k*>(x + r * arb);
    for (std::int64_t i = 0; i < nb; ++i) {
      tiles[i].d[r] = xb[i].d;
      for (int l = 0; l < 8; ++l)
        tiles[i].sum_pairs[l][r] = int16_pair(xb[i].bsums[2 * l], xb[i].bsums[2 * l + 1]);
      for (int g = 0; g < 64; ++g) std::memcpy(tiles[i].qs[g][r], xb[i].qs + 4 * g, 4);
    }
  }
}

// The AVX2 (no VNNI) eight-row tiled kernel for `t`, or one with null members.
inline tiled_kernel tiled_kernel_avx2(tf::model::tensor_type t) {
  using tf::model::tensor_type;
  namespace v = avx2;
  auto zero = [](auto decode) {
    return tiled_kernel{decode,
                        tile_rows_q8_0x8,
                        dot_tiles<v::block0_tiled8, v::block_q8_0_x8, v::dot0_tile8<1>>,
                        dot_tiles<v::block0_tiled8, v::block_q8_0_x8, v::dot0_tile8<1>>,
                        1,
                        sizeof(v::block0_tiled8),
                        sizeof(v::block_q8_0_x8),
                        8};
  };
  switch (t) {
    case tensor_type::q4_0:
      return zero(decode_rows<block_q4_0, v::block0_tiled8, v::decode0_tiled8<block_q4_0>>);
    case tensor_type::q5_0:
      return zero(decode_rows<block_q5_0, v::block0_tiled8, v::decode0_tiled8<block_q5_0>>);
    case tensor_type::q8_0:
      return zero(decode_rows<block_q8_0, v::block0_tiled8, v::decode0_tiled8<block_q8_0>>);
    case tensor_type::q4_k:
      return {decode_rows<block_q4_k, v::block_q4_k_tiled8, v::decode_q4_k_tiled8>,
              tile_rows_q8_kx8,
              dot_tiles<v::block_q4_k_tiled8, v::block_q8_k_x8, v::dot_q4_k_tile8<1>>,
              dot_tiles<v::block_q4_k_tiled8, v::block_q8_k_x8, v::dot_q4_k_tile8<2>>,
              2,
              sizeof(v::block_q4_k_tiled8),
              sizeof(v::block_q8_k_x8),
              8};
    case tensor_type::q6_k:
      return {decode_rows<block_q6_k, v::block_q6_k_tiled8, v::decode_q6_k_tiled8>,
              tile_rows_q8_k_q6x8,
              dot_tiles<v::block_q6_k_tiled8, v::block_q8_k_q6_x8, v::dot_q6_k_tile8<1>>,
              dot_tiles<v::block_q6_k_tiled8, v::block_q8_k_q6_x8, v::dot_q6_k_tile8<1>>,
              1,
              sizeof(v::block_q6_k_tiled8),
              sizeof(v::block_q8_k_q6_x8),
              8};
    default:
      return {};
  }
}

// The tiled kernel for weight type `t` on `path`, or one with null members where there is none;
// with `amx`, Q4_K's sixteen weight rows at a time on AMX int8 tiles (the same bits).
inline tiled_kernel tiled_kernel_for(tf::model::tensor_type t, isa path, bool amx = false) {
  using tf::model::tensor_type;
  if (path == isa::avx2) return tiled_kernel_avx2(t);
  if (path != isa::avx512) return {};
  namespace v = avx512;
#if TF_KERNELS_AMX
  if (amx && t == tensor_type::q4_k) {
    using amx::block_q4_k_amx;
    static_assert(amx::out_stride == 64, "outs holds 64 weight rows per activation row");
    const auto one = dot_tiles<block_q4_k_amx, v::block_q8_k_x16, amx::dot_q4_k_amx<1>>;
    return {decode_rows<block_q4_k, block_q4_k_amx, amx::decode_q4_k_amx>,
            tile_rows_q8_k<v::block_q8_k_x16, 4>,
            one,
            one,
            16,
            sizeof(block_q4_k_amx),
            sizeof(v::block_q8_k_x16),
            16,
            dot_tiles<block_q4_k_amx, v::block_q8_k_x16, amx::dot_q4_k_amx<2>>,
            true};
  }
#else
  (void)amx;
#endif
  auto zero = [](auto decode) {
    return tiled_kernel{decode,
                        tile_rows_0u,
                        dot_tiles<v::block0_tiled, v::block_q8_0u_x16, v::dot0_tile16<1>>,
                        dot_tiles<v::block0_tiled, v::block_q8_0u_x16, v::dot0_tile16<2>>,
                        2,
                        sizeof(v::block0_tiled),
                        sizeof(v::block_q8_0u_x16)};
  };
  switch (t) {
    case tensor_type::q4_0:
      return zero(decode_rows<block_q4_0, v::block0_tiled, v::decode0_tiled<block_q4_0>>);
    case tensor_type::q5_0:
      return zero(decode_rows<block_q5_0, v::block0_tiled, v::decode0_tiled<block_q5_0>>);
    case tensor_type::q8_0:
      return zero(decode_rows<block_q8_0, v::block0_tiled, v::decode0_tiled<block_q8_0>>);
    case tensor_type::q4_k:
      return {decode_rows<block_q4_k, v::block_q4_k_tiled, v::decode_q4_k_tiled>,
              tile_rows_q8_k<v::block_q8_k_x16, 4>,
              dot_tiles<v::block_q4_k_tiled, v::block_q8_k_x16, v::dot_q4_k_tile16<1>>,
              dot_tiles<v::block_q4_k_tiled, v::block_q8_k_x16, v::dot_q4_k_tile16<4>>,
              4,
              sizeof(v::block_q4_k_tiled),
              sizeof(v::block_q8_k_x16)};
    case tensor_type::q5_k:
      return {decode_rows<block_q5_k, v::block_q5_k_tiled, v::decode_q5_k_tiled>,
              tile_rows_q8_k<v::block_q8_k_x16, 4>,
              dot_tiles<v::block_q5_k_tiled, v::block_q8_k_x16, v::dot_q5_k_tile16<1>>,
              dot_tiles<v::block_q5_k_tiled, v::block_q8_k_x16, v::dot_q5_k_tile16<2>>,
              2,
              sizeof(v::block_q5_k_tiled),
              sizeof(v::block_q8_k_x16)};
    case tensor_type::q6_k:
      return {decode_rows<block_q6_k, v::block_q6_k_tiled, v::decode_q6_k_tiled>,
              tile_rows_q8_k<v::block_q8_k_q6_x16, 8>,
              dot_tiles<v::block_q6_k_tiled, v::block_q8_k_q6_x16, v::dot_q6_k_tile16<1>>,
              dot_tiles<v::block_q6_k_tiled, v::block_q8_k_q6_x16, v::dot_q6_k_tile16<2>>,
              2,
              sizeof(v::block_q6_k_tiled),
              sizeof(v::block_q8_k_q6_x16)};
    default:
      return {};
  }
}
#endif

// One activation row against `rows` consecutive weight rows `wrb` bytes apart, into y [rows].
using matvec_fn = void (*)(const std::uint8_t* w, std::int64_t wrb, std::int64_t rows,
                           const void* x, std::int64_t n, float* y);

#if TF_KERNELS_X86
// The per-row indirect call and scatter of the batched path cost more than the dot for short
// rows, so one activation row goes through one call per thread.
template <class W, class X,
          void (*MV)(const std::uint8_t*, std::int64_t, std::int64_t, const X*, std::int64_t,
                     float*)>
void matvec_rows(const std::uint8_t* w, std::int64_t wrb, std::int64_t rows, const void* x,
                 std::int64_t n, float* y) {
  MV(w, wrb, rows, static_cast<const X*>(x), n, y);
}
#define TF_MATVEC(ns, fn, W, X) matvec_rows<W, X, ns::matvec<W, X, ns::fn<1>>>
#define TF_MATVEC_0(ns, W) matvec_rows<W, block_q8_0, ns::matvec0<W, block_q8_0>>
#define TF_MATVEC_0C(W) matvec_rows<W, block_q8_0c, avx512::matvec0c<W>>
#define TF_MATVEC_K(W) matvec_rows<W, block_q8_k, avx512::matvec_k_streamed<W>>
#endif

/// A matvec routine for (type, path), or nullptr where the one-row dot is used row by row.
inline matvec_fn matvec_for(tf::model::tensor_type t, isa path) {
  using tf::model::tensor_type;
#if TF_KERNELS_X86
  if (path == isa::avx512) {
    switch (t) {
      case tensor_type::q4_0:
        return TF_MATVEC_0C(block_q4_0);
      case tensor_type::q5_0:
        return TF_MATVEC_0C(block_q5_0);
      case tensor_type::q8_0:
        return TF_MATVEC_0C(block_q8_0);
      case tensor_type::q2_k:
        return TF_MATVEC(avx512, dot_q2_k, block_q2_k, block_q8_k);
      case tensor_type::q3_k:
        return TF_MATVEC(avx512, dot_q3_k, block_q3_k, block_q8_k);
      case tensor_type::q4_k:
        return TF_MATVEC_K(block_q4_k);
      case tensor_type::q5_k:
        return TF_MATVEC_K(block_q5_k);
      case tensor_type::q6_k:
        return TF_MATVEC_K(block_q6_k);
      default:
        return nullptr;
    }
  }
  if (path == isa::avx2) {
    switch (t) {
      case tensor_type::q4_0:
        return TF_MATVEC_0(avx2, block_q4_0);
      case tensor_type::q5_0:
        return TF_MATVEC_0(avx2, block_q5_0);
      case tensor_type::q8_0:
        return TF_MATVEC_0(avx2, block_q8_0);
      case tensor_type::q2_k:
        return TF_MATVEC(avx2, dot_q2_k, block_q2_k, block_q8_k);
      case tensor_type::q3_k:
        return TF_MATVEC(avx2, dot_q3_k, block_q3_k, block_q8_k);
      case tensor_type::q4_k:
        return matvec_rows<block_q4_k, block_q8_k, avx2::matvec_q4_k>;
      case tensor_type::q5_k:
        return TF_MATVEC(avx2, dot_q5_k, block_q5_k, block_q8_k);
      case tensor_type::q6_k:
        return TF_MATVEC(avx2, dot_q6_k, block_q6_k, block_q8_k);
      default:
        return nullptr;
    }
  }
#undef TF_MATVEC
#undef TF_MATVEC_0C
#undef TF_MATVEC_K
#undef TF_MATVEC_0
#endif
  (void)t;
  (void)path;
  return nullptr;
}

#if TF_KERNELS_X86
// fn.template operator()<NR>() for the activation row count nr as a constant: 1..Max, and Max
// for any other count (the callers pass 1..Max).
template <int Max, class Fn>
void with_rows(std::int64_t nr, Fn&& fn) {
  auto pick = [&]<int... I>(std::integer_sequence<int, I...>) {
    // The first count that matches runs; || stops the fold there.
    (void)(((nr == I + 1 || I + 1 == Max) ? (fn.template operator()<I + 1>(), true) : false) ||
           ...);
  };
  pick(std::make_integer_sequence<int, Max>{});
}

// fn(W const*) for the weight block type W of a _0 type t (Q8_0, Q5_0, else Q4_0).
template <class Fn>
void with_0_block(tf::model::tensor_type t, Fn&& fn) {
  using tf::model::tensor_type;
  if (t == tensor_type::q8_0) return fn(static_cast<const block_q8_0*>(nullptr));
  if (t == tensor_type::q5_0) return fn(static_cast<const block_q5_0*>(nullptr));
  return fn(static_cast<const block_q4_0*>(nullptr));
}

// avx512::matmat0c for (type, nr in 1..8).
inline void matmat0c_rows(tf::model::tensor_type t, const std::uint8_t* w, std::int64_t wrb,
                          std::int64_t rows, const block_q8_0c* const* x, std::int64_t nr,
                          std::int64_t nb, float* y, std::int64_t y_stride,
                          std::int64_t prefetch_end) {
  with_0_block(t, [&]<class W>(const W*) {
    with_rows<8>(nr, [&]<int NR>() {
      avx512::matmat0c<NR, W>(w, wrb, rows, x, nb, y, y_stride, prefetch_end);
    });
  });
}

/// Whether t is Q4_K, Q5_K or Q6_K (the K-quants with a streamed few-row kernel).
inline bool is_streamed_k_type(tf::model::tensor_type t) {
  using tf::model::tensor_type;
  return t == tensor_type::q4_k || t == tensor_type::q5_k || t == tensor_type::q6_k;
}

// matmat_k_streamed on `path` for (type in Q4_K, Q5_K, Q6_K; nr in 1..8 on AVX-512, 1..4 on
// AVX2, whose sixteen registers hold fewer rows' accumulators beside a decoded super-block).
inline void matmat_k_rows(tf::model::tensor_type t, isa path, const std::uint8_t* w,
                          std::int64_t wrb, std::int64_t rows, const block_q8_k* const* x,
                          std::int64_t nr, std::int64_t nb, float* y, std::int64_t y_stride,
                          std::int64_t prefetch_end) {
  using tf::model::tensor_type;
  auto with_block = [&]<class W>(const W*) {
    if (path == isa::avx512)
      return with_rows<8>(nr, [&]<int NR>() {
        avx512::matmat_k_streamed<NR, W>(w, wrb, rows, x, nb, y, y_stride, prefetch_end);
      });
    with_rows<4>(nr, [&]<int NR>() {
      avx2::matmat_k_streamed<NR, W>(w, wrb, rows, x, nb, y, y_stride, prefetch_end);
    });
  };
  if (t == tensor_type::q4_k) return with_block(static_cast<const block_q4_k*>(nullptr));
  if (t == tensor_type::q5_k) return with_block(static_cast<const block_q5_k*>(nullptr));
  with_block(static_cast<const block_q6_k*>(nullptr));
}

// avx2::matmat0 for (type, nr in 1..8).
inline void matmat0_rows(tf::model::tensor_type t, const std::uint8_t* w, std::int64_t wrb,
                         std::int64_t rows, const block_q8_0* const* x, const float* dx,
                         std::int64_t nr, std::int64_t nb, float* y, std::int64_t y_stride,
                         std::int64_t prefetch_end) {
  with_0_block(t, [&]<class W>(const W*) {
    with_rows<8>(nr, [&]<int NR>() {
      avx2::matmat0<NR, W>(w, wrb, rows, x, dx, nb, y, y_stride, prefetch_end);
    });
  });
}

// avx512::matmat0c_rows8 for nr in 1..4.
inline void matmat0c_rows8(const block_q8_0x8* w, std::int64_t groups, const block_q8_0c* const* x,
                           std::int64_t nr, std::int64_t nb, float* y, std::int64_t y_stride) {
  with_rows<4>(nr, [&]<int NR>() { avx512::matmat0c_rows8<NR>(w, groups, x, nb, y, y_stride); });
}
#endif

/// Whether t is Q4_0, Q5_0 or Q8_0 (block_q8_0 activations, dot0_rows' steps).
inline bool is_0_type(tf::model::tensor_type t) {
  using tf::model::tensor_type;
  return t == tensor_type::q4_0 || t == tensor_type::q5_0 || t == tensor_type::q8_0;
}

/// The most activation rows the streamed few-row paths take (the _0 types on AVX2 and AVX-512,
/// Q4_K / Q5_K / Q6_K on AVX-512); from 16 on the tiles cost less per row.
inline constexpr std::int64_t few_max = 15;

/// The most activation rows the VNNI rows8 kernel takes (four a pass, the weights from L2).
inline constexpr std::int64_t rows8_few_max = 64;

/// log2 of the offset the VNNI matvecs add to a _0 type's quants (see block_q8_0c).
inline int unsigned_q_shift(tf::model::tensor_type t) {
  using tf::model::tensor_type;
  return t == tensor_type::q8_0 ? 7 : t == tensor_type::q5_0 ? 4 : 3;
}

/// Whether (type, path) dots against block_q8_0u rows instead of block_q8_0 (block_q8_0c for
/// one activation row).
inline bool unsigned_q8_0_act(tf::model::tensor_type t, isa path) {
  using tf::model::tensor_type;
  return TF_KERNELS_X86 && path == isa::avx512 &&
         (t == tensor_type::q4_0 || t == tensor_type::q5_0 || t == tensor_type::q8_0);
}

/// The dot routine for (type, path); the `n` it takes is blocks, or elements for float types.
inline dot_fn dot_for(tf::model::tensor_type t, isa path) {
  using tf::model::tensor_type;
  namespace p = portable;
#if TF_KERNELS_X86
  if (path == isa::avx512) {
    switch (t) {
      case tensor_type::q4_0:
        return TF_ROWS16_0U(block_q4_0);
      case tensor_type::q5_0:
        return TF_ROWS16_0U(block_q5_0);
      case tensor_type::q8_0:
        return TF_ROWS16_0U(block_q8_0);
      case tensor_type::q2_k:
        return TF_ROWS8(avx512, dot_q2_k, block_q2_k, block_q8_k);
      case tensor_type::q3_k:
        return TF_ROWS8(avx512, dot_q3_k, block_q3_k, block_q8_k);
      case tensor_type::q4_k:
        return TF_ROWS8(avx512, dot_q4_k, block_q4_k, block_q8_k);
      case tensor_type::q5_k:
        return TF_ROWS8(avx512, dot_q5_k, block_q5_k, block_q8_k);
      case tensor_type::q6_k:
        return TF_ROWS8(avx512, dot_q6_k, block_q6_k, block_q8_k);
      case tensor_type::f32:
        return rows_one_by_one<float, float, avx512::dot_f32>;
      case tensor_type::f16:
        return rows_one_by_one<std::uint16_t, float, avx512::dot_f16>;
      default:
        break;
    }
  }
  if (path == isa::avx2 || path == isa::avx512) {
    switch (t) {
      case tensor_type::q4_0:
        return TF_ROWS4(avx2, dot_q4_0, block_q4_0, block_q8_0);
      case tensor_type::q5_0:
        return TF_ROWS4(avx2, dot_q5_0, block_q5_0, block_q8_0);
      case tensor_type::q8_0:
        return TF_ROWS4(avx2, dot_q8_0, block_q8_0, block_q8_0);
      case tensor_type::q2_k:
        return TF_ROWS4(avx2, dot_q2_k, block_q2_k, block_q8_k);
      case tensor_type::q3_k:
        return TF_ROWS4(avx2, dot_q3_k, block_q3_k, block_q8_k);
      case tensor_type::q4_k:
        return TF_ROWS4(avx2, dot_q4_k, block_q4_k, block_q8_k);
      case tensor_type::q5_k:
        return TF_ROWS4(avx2, dot_q5_k, block_q5_k, block_q8_k);
      case tensor_type::q6_k:
        return TF_ROWS4(avx2, dot_q6_k, block_q6_k, block_q8_k);
      case tensor_type::f32:
        return rows_one_by_one<float, float, avx2::dot_f32>;
      case tensor_type::f16:
        return rows_one_by_one<std::uint16_t, float, avx2::dot_f16>;
      default:
        break;
    }
  }
#undef TF_ROWS4
#undef TF_ROWS16_0U
#undef TF_ROWS8
#else
  (void)path;
#endif
  switch (t) {
    case tensor_type::f32:
      return rows_one_by_one<float, float, p::dot_f32>;
    case tensor_type::f16:
      return rows_one_by_one<std::uint16_t, float, p::dot_f16>;
    case tensor_type::bf16:
      return rows_one_by_one<std::uint16_t, float, p::dot_bf16>;
    case tensor_type::q4_0:
      return rows_one_by_one<block_q4_0, block_q8_0, p::dot_q4_0>;
    case tensor_type::q4_1:
      return rows_one_by_one<block_q4_1, block_q8_1, p::dot_q4_1>;
    case tensor_type::q5_0:
      return rows_one_by_one<block_q5_0, block_q8_0, p::dot_q5_0>;
    case tensor_type::q5_1:
      return rows_one_by_one<block_q5_1, block_q8_1, p::dot_q5_1>;
    case tensor_type::q8_0:
      return rows_one_by_one<block_q8_0, block_q8_0, p::dot_q8_0>;
    case tensor_type::q8_1:
      return rows_one_by_one<block_q8_1, block_q8_0, p::dot_q8_1>;
    case tensor_type::q2_k:
      return rows_one_by_one<block_q2_k, block_q8_k, p::dot_q2_k>;
    case tensor_type::q3_k:
      return rows_one_by_one<block_q3_k, block_q8_k, p::dot_q3_k>;
    case tensor_type::q4_k:
      return rows_one_by_one<block_q4_k, block_q8_k, p::dot_q4_k>;
    case tensor_type::q5_k:
      return rows_one_by_one<block_q5_k, block_q8_k, p::dot_q5_k>;
    case tensor_type::q6_k:
      return rows_one_by_one<block_q6_k, block_q8_k, p::dot_q6_k>;
    case tensor_type::q8_k:
      return rows_one_by_one<block_q8_k, block_q8_k, p::dot_q8_k>;
    default:
      break;
  }
  act_format_of(t);  // throws naming the type
  return nullptr;
}

}  // namespace detail

/// Bytes one activation row of `k` elements takes once quantized for weight type `t`.
inline std::int64_t act_row_bytes(tf::model::tensor_type t, std::int64_t k) {
  switch (act_format_of(t)) {
    case act_format::f32:
      return k * 4;
    case act_format::q8_0:
      return k / qk32 * static_cast<std::int64_t>(sizeof(block_q8_0));
    case act_format::q8_1:
      return k / qk32 * static_cast<std::int64_t>(sizeof(block_q8_1));
    case act_format::q8_k:
      return k / qk256 * static_cast<std::int64_t>(sizeof(block_q8_k));
  }
  return 0;
}

/// Quantizes row r of x [b, k] for weight type `t` into `dst` [act_row_bytes(t, k)] bytes; every
/// path writes the same bytes.
inline void quantize_activation_row(tf::model::tensor_type t, const float* x, std::int64_t k,
                                    std::uint8_t* dst, isa path = default_isa()) {
  switch (act_format_of(t)) {
    case act_format::f32:
      std::memcpy(dst, x, static_cast<std::size_t>(k * 4));
      return;
    case act_format::q8_0:
#if TF_KERNELS_X86
      if (path != isa::portable)
        return avx2::quantize_row_q8_0(x, reinterpret_cast<block_q8_0*>(dst), k);
#endif
      return quantize_row_q8_0(x, reinterpret_cast<block_q8_0*>(dst), k);
    case act_format::q8_1:
      return quantize_row_q8_1(x, reinterpret_cast<block_q8_1*>(dst), k);
    case act_format::q8_k:
#if TF_KERNELS_X86
      if (path != isa::portable)
        return avx2::quantize_row_q8_k(x, reinterpret_cast<block_q8_k*>(dst), k);
#endif
      return quantize_row_q8_k(x, reinterpret_cast<block_q8_k*>(dst), k);
  }
  (void)path;
}

/// Quantizes x [b, k] for weight type `t` into `dst` [b, act_row_bytes(t, k)] bytes.
inline void quantize_activations(tf::model::tensor_type t, const float* x, std::int64_t b,
                                 std::int64_t k, std::uint8_t* dst, isa path = default_isa()) {
  const std::int64_t rb = act_row_bytes(t, k);
  for (std::int64_t r = 0; r < b; ++r) quantize_activation_row(t, x + r * k, k, dst + r * rb, path);
}

namespace detail {

// `bytes` of buf from a 64-byte boundary, buf grown to hold them: a vector load split across two
// cache lines costs the hot loops.
inline std::uint8_t* aligned_scratch(std::vector<std::uint8_t>& buf, std::int64_t bytes) {
  if (buf.size() < static_cast<std::size_t>(bytes + 64))
    buf.resize(static_cast<std::size_t>(bytes + 64));
  return buf.data() + (64 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64) % 64;
}

// Bytes of the one activation row (type, path)'s matvec reads: block_q8_0c rows on the VNNI _0
// path, else the type's activation format.
inline std::int64_t matvec_act_bytes(tf::model::tensor_type t, std::int64_t k, isa path) {
  return unsigned_q8_0_act(t, path) ? k / qk32 * static_cast<std::int64_t>(sizeof(block_q8_0c))
                                    : act_row_bytes(t, k);
}

// x [k] quantized into dst in the form of matvec_act_bytes.
inline void quantize_matvec_act(tf::model::tensor_type t, const float* x, std::int64_t k,
                                std::uint8_t* dst, isa path) {
#if TF_KERNELS_X86
  if (unsigned_q8_0_act(t, path))
    return avx2::quantize_row_q8_0c(x, reinterpret_cast<block_q8_0c*>(dst), k, unsigned_q_shift(t));
#endif
  quantize_activation_row(t, x, k, dst, path);
}

// p.w and p.y checked, k a whole number of blocks.
inline void check_params(const matmul_params& p) {
  const auto tr = tf::model::traits_of(p.w_type);
  if (p.n < 0 || p.b < 0 || p.k <= 0 || p.k % tr.block_elems != 0)
    throw tf::error(
        "tf::kernels::cpu::matmul: k={} is not a whole number of {}-element {} "
        "blocks (n={}, b={})",
        p.k, tr.block_elems, tr.name, p.n, p.b);
  if (p.n > 0 && p.b > 0 && (!p.w || !p.x || !p.y))
    throw tf::error("tf::kernels::cpu::matmul: null w, x or y");
  if (p.layout == weight_layout::rows8 && !rows8_fits(p.w_type, p.n, p.k))
    throw tf::error("tf::kernels::cpu::matmul: a [{}, {}] {} matrix cannot be in rows8", p.n, p.k,
                    tr.name);
}

}  // namespace detail

/// y = x W^T on `pool`, over weight rows in static chunks, with the dot routines of `path` (and
/// AMX tiles on the AVX-512 path where `amx` and amx_tiles(); the same bits either way).
/// Throws tf::error if k is not a whole number of blocks or a pointer is missing.
inline void matmul(const matmul_params& p, thread_pool& pool, isa path = default_isa(),
                   bool amx = true) {
  detail::check_params(p);
  if (p.n == 0 || p.b == 0) return;
  const auto tr = tf::model::traits_of(p.w_type);
  const detail::dot_fn dot = detail::dot_for(p.w_type, path);
  const bool float_act = act_format_of(p.w_type) == act_format::f32;
  const bool unsigned_act = detail::unsigned_q8_0_act(p.w_type, path);
  const detail::matvec_fn mv = p.b == 1 ? detail::matvec_for(p.w_type, path) : nullptr;
  // A few rows (several decode streams, or a verify round's k + 1 positions of one stream) go
  // through the matvec steps too, streaming the weights as the one-row matvec does, each weight
  // block decoded once for all of them: the VNNI _0 types (few_rows), the _0 types on AVX2
  // (few_0) and the K-quants on AVX-512 (few_k).
  const bool few = p.b >= 2 && p.b <= detail::few_max;
  const bool few_rows = unsigned_act && few;
  const bool few_0 = TF_KERNELS_X86 && path == isa::avx2 && few && detail::is_0_type(p.w_type);
  // Q4_K's sixteen-row tiles cost less than its few-row kernel from eight rows on: 8-15 rows
  // fill one tile, topped up with zero rows whose results are dropped.
  const bool pad_tile = TF_KERNELS_X86 && path == isa::avx512 && p.b >= 8 && p.b < 16 &&
                        p.w_type == tf::model::tensor_type::q4_k;
  const std::int64_t act_rows = pad_tile ? 16 : p.b;
  // (AVX2's Q4_K has its own few-row kernel, few_q4_k below.)
  const bool few_k =
      TF_KERNELS_X86 && few && !pad_tile && detail::is_streamed_k_type(p.w_type) &&
      (path == isa::avx512 || (path == isa::avx2 && p.w_type != tf::model::tensor_type::q4_k));
  // The rows8 head's few-row kernel stays ahead of the row-major tiles up to about a hundred rows.
  const bool few_rows8 =
      unsigned_act && p.layout == weight_layout::rows8 && p.b <= detail::rows8_few_max;
  // The VNNI _0 matvecs take block_q8_0c, the batched dots block_q8_0u.
  const bool corrected_act = unsigned_act && (mv || few_rows || few_rows8);
  const std::int64_t arb =
      corrected_act  ? p.k / qk32 * static_cast<std::int64_t>(sizeof(block_q8_0c))
      : unsigned_act ? p.k / qk32 * static_cast<std::int64_t>(sizeof(block_q8_0u))
                     : act_row_bytes(p.w_type, p.k);
  const std::int64_t wrb =
      static_cast<std::int64_t>(tf::model::row_bytes(p.w_type, static_cast<std::uint64_t>(p.k)));
  const std::int64_t dot_n = float_act ? p.k : p.k / tr.block_elems;
  // Reused per calling thread: decode calls this hundreds of times per token.
  thread_local std::vector<std::uint8_t> scratch;
  const std::uint8_t* xq = reinterpret_cast<const std::uint8_t*>(p.x);
  if (!float_act) {
    std::uint8_t* dst = detail::aligned_scratch(scratch, arb * act_rows);
    std::memset(dst + arb * p.b, 0, static_cast<std::size_t>(arb * (act_rows - p.b)));
    auto quantize = [&](std::int64_t r) {
      const float* x = p.x + r * p.k;
      std::uint8_t* d = dst + r * arb;
      if (!unsigned_act || corrected_act)
        return detail::quantize_matvec_act(p.w_type, x, p.k, d, path);
#if TF_KERNELS_X86
      avx2::quantize_row_q8_0u(x, reinterpret_cast<block_q8_0u*>(d), p.k);
#endif
    };
    pool.parallel_for(p.b, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) quantize(r);
    });
    xq = dst;
  }
  thread_local std::vector<const void*> rows;
  rows.resize(static_cast<std::size_t>(p.b));
  for (std::int64_t r = 0; r < p.b; ++r) rows[static_cast<std::size_t>(r)] = xq + r * arb;
  const void* const* xr = rows.data();
#if TF_KERNELS_X86
  // Many rows: whole groups of a tile's width as tiles for a tiled kernel, where the type has one.
  detail::tiled_kernel tk = act_rows >= 8 && !corrected_act && !few_0 && !few_k
                                ? detail::tiled_kernel_for(p.w_type, path, amx && amx_tiles())
                                : detail::tiled_kernel{};
  if (act_rows < tk.width) tk = {};
  // A few activation rows against Q4_K on AVX2: eight weight rows at a time in the lanes.
  const bool few_q4_k =
      path == isa::avx2 && p.w_type == tf::model::tensor_type::q4_k && p.b >= 2 && !tk.dot;
  const std::int64_t tw = tk.width;
  const std::int64_t tiled_groups = tk.dot ? act_rows / tw : 0;
  thread_local std::vector<std::uint8_t> tile_buf;
  const std::uint8_t* tiles = nullptr;
  if (tk.dot) {
    std::uint8_t* to = detail::aligned_scratch(tile_buf, tiled_groups * dot_n * tk.tiled);
    pool.parallel_for(tiled_groups, [&](std::int64_t g0, std::int64_t g1) {
      for (std::int64_t g = g0; g < g1; ++g)
        tk.tile(xq + g * tw * arb, arb, dot_n, to + g * dot_n * tk.tiled);
    });
    tiles = to;
  }
  // Rows [few_first, b) take a few-row kernel in groups of at most few_width: all of them on the
  // few-row paths, or the AVX2 _0 tiles' leftover rows (fewer than eight).
  const bool few_streamed = few_0 || few_k || few_rows;
  const std::int64_t few_first = few_streamed ? 0
                                 : tk.dot && path == isa::avx2 && detail::is_0_type(p.w_type)
                                     ? tiled_groups * tw
                                     : p.b;
  const std::int64_t few_width = few_k && path == isa::avx2 ? 4 : 8;
  const std::int64_t few_n = p.b - few_first, few_groups = (few_n + few_width - 1) / few_width;
  const std::int64_t few_per = few_groups ? (few_n + few_groups - 1) / few_groups : 0;
  // avx2::matmat0's activation scales as f32: [nb][8] per group, row r of the group in lane r.
  thread_local std::vector<float> scales;
  if (few_n > 0 && !few_k && !few_rows) {
    scales.assign(static_cast<std::size_t>(few_groups * dot_n * 8), 0.0f);
    for (std::int64_t r = 0; r < few_n; ++r) {
      const auto* xb = reinterpret_cast<const block_q8_0*>(xq + (few_first + r) * arb);
      float* d = scales.data() + (r / few_per) * dot_n * 8 + r % few_per;
      for (std::int64_t i = 0; i < dot_n; ++i) d[8 * i] = fp16_to_fp32(xb[i].d);
    }
  }
  // By pointer: the pool's threads have thread_locals of their own.
  const float* few_scales = scales.data();
#endif
  // Activation rows in groups small enough to stay in L1 while every weight row of the chunk is
  // dotted with them; the weights then stream from L2 once per group.
  const std::int64_t group = std::max<std::int64_t>(
      16, std::min<std::int64_t>(64, (24 << 10) / std::max<std::int64_t>(arb, 1)) / 16 * 16);
  // Output rows [begin, end) from their row-major weights at wr.
  auto run_rows = [&](const std::uint8_t* wr, std::int64_t begin, std::int64_t end) {
    if (mv) return mv(wr, wrb, end - begin, xq, dot_n, p.y + begin);
#if TF_KERNELS_X86
    if (tk.dot) {
      // Weight rows 64 at a time decoded into L2, then every tile against them.
      thread_local std::vector<std::uint8_t> decoded;
      std::uint8_t* wd = detail::aligned_scratch(decoded, 64 * dot_n * tk.decoded);
      const std::int64_t rest = tiled_groups * tw;
      alignas(64) float outs[64 * 32];  // [64][16], or act-major [32][64]
      float out[64];
      for (std::int64_t s0 = begin; s0 < end; s0 += 64) {
        const std::int64_t s1 = std::min(end, s0 + 64);
        for (std::int64_t row = s0; row < s1; ++row)
          tk.decode(wr + (row - begin) * wrb, wd + (row - s0) * dot_n * tk.decoded, dot_n);
        // Zero rows up to a whole run (their results are dropped).
        const std::int64_t s1r = tk.amx ? s0 + (s1 - s0 + tk.rows - 1) / tk.rows * tk.rows : s1;
        std::memset(wd + (s1 - s0) * dot_n * tk.decoded, 0,
                    static_cast<std::size_t>((s1r - s1) * dot_n * tk.decoded));
        for (std::int64_t g = 0; g < tiled_groups;) {
          const std::uint8_t* tile = tiles + g * dot_n * tk.tiled;
          const bool pair = tk.dots_pair && g + 1 < tiled_groups;
          // Not the zero rows; the row-major kernels write [rows][16] (AVX2's first eight).
          const std::int64_t acts = std::min(pair ? 2 * tw : tw, p.b - g * tw);
          std::int64_t row0 = s0;
          for (; row0 + tk.rows <= s1r; row0 += tk.rows)
            (pair ? tk.dots_pair : tk.dots)(wd + (row0 - s0) * dot_n * tk.decoded, tile, dot_n,
                                            outs + (row0 - s0) * (tk.amx ? 1 : 16));
          for (std::int64_t row = row0; row < s1; ++row)
            tk.dot(wd + (row - s0) * dot_n * tk.decoded, tile, dot_n, outs + (row - s0) * 16);
          // Back to row-major in whole runs of the tile's output rows.
          for (std::int64_t r = 0; r < acts; ++r)
            if (tk.amx)
              std::memcpy(p.y + (g * tw + r) * p.n + s0, outs + r * amx::out_stride,
                          static_cast<std::size_t>(s1 - s0) * sizeof(float));
            else
              for (std::int64_t row = s0; row < s1; ++row)
                p.y[(g * tw + r) * p.n + row] = outs[(row - s0) * 16 + r];
          g += pair ? 2 : 1;
        }
        if (few_first < p.b)  // the rows just decoded are still in cache: no prefetch
          detail::matmat0_rows(p.w_type, wr + (s0 - begin) * wrb, wrb, s1 - s0,
                               reinterpret_cast<const block_q8_0* const*>(xr) + few_first,
                               few_scales, few_n, dot_n, p.y + few_first * p.n + s0, p.n, 0);
        else if (rest < p.b)
          for (std::int64_t row = s0; row < s1; ++row) {
            dot(wr + (row - begin) * wrb, xr + rest, dot_n, p.b - rest, out);
            for (std::int64_t r = rest; r < p.b; ++r) p.y[r * p.n + row] = out[r - rest];
          }
      }
      return;
    }
    if (few_q4_k)
      return avx2::matmat_q4_k(wr, wrb, end - begin, reinterpret_cast<const block_q8_k* const*>(xr),
                               p.b, dot_n, p.y + begin, p.n);
    if (few_streamed) {
      // Groups of at most few_width rows (the registers' worth), each against runs of weight
      // rows that stay in L1 meanwhile (the first group's pass prefetches them).
      const std::int64_t rows = end - begin;
      const std::int64_t run = few_groups == 1 ? rows : std::max<std::int64_t>(1, (16 << 10) / wrb);
      for (std::int64_t s0 = 0; s0 < rows; s0 += run) {
        const std::int64_t s1 = std::min(rows, s0 + run);
        for (std::int64_t g = 0; g < few_groups; ++g) {
          const std::int64_t r0 = g * few_per, nr = std::min(few_per, p.b - r0);
          const std::int64_t prefetch_end = g == 0 ? (rows - s0) * wrb : 0;
          const std::uint8_t* ws = wr + s0 * wrb;
          float* ys = p.y + r0 * p.n + begin + s0;
          if (few_0)
            detail::matmat0_rows(p.w_type, ws, wrb, s1 - s0,
                                 reinterpret_cast<const block_q8_0* const*>(xr) + r0,
                                 few_scales + g * dot_n * 8, nr, dot_n, ys, p.n, prefetch_end);
          else if (few_k)
            detail::matmat_k_rows(p.w_type, path, ws, wrb, s1 - s0,
                                  reinterpret_cast<const block_q8_k* const*>(xr) + r0, nr, dot_n,
                                  ys, p.n, prefetch_end);
          else
            detail::matmat0c_rows(p.w_type, ws, wrb, s1 - s0,
                                  reinterpret_cast<const block_q8_0c* const*>(xr) + r0, nr, dot_n,
                                  ys, p.n, prefetch_end);
        }
      }
      return;
    }
#endif
    float out[64];
    for (std::int64_t r0 = 0; r0 < p.b; r0 += group) {
      const std::int64_t nr = p.b - r0 < group ? p.b - r0 : group;
      for (std::int64_t row = begin; row < end; ++row) {
        dot(wr + (row - begin) * wrb, xr + r0, dot_n, nr, out);
        for (std::int64_t r = 0; r < nr; ++r) p.y[(r0 + r) * p.n + row] = out[r];
      }
    }
  };
  // Weight rows across the pool: static chunks, or for a large matrix (a tied head) pieces of
  // about 4 MiB claimed in turn; a row's result does not depend on which thread computes it.
  // `unit` rows go together (8 for rows8, whose groups do not split).
  auto over_rows = [&](std::int64_t unit, auto&& fn) {
    const std::int64_t units = p.n / unit;
    const std::int64_t piece = std::max<std::int64_t>(16, (4 << 20) / (wrb * unit) / 16 * 16);
    auto in_rows = [&](std::int64_t u0, std::int64_t u1) { fn(u0 * unit, u1 * unit); };
    if (!(mv || few_rows || few_0 || few_k) || pool.size() == 1 || units < 4 * pool.size() * piece)
      return pool.parallel_for(units, in_rows);
    pool.parallel_pieces(units, piece, in_rows);
  };
  const auto* w = static_cast<const std::uint8_t*>(p.w);
  if (p.layout == weight_layout::rows) {
    over_rows(1,
              [&](std::int64_t begin, std::int64_t end) { run_rows(w + begin * wrb, begin, end); });
    return;
  }
  const auto* w8 = reinterpret_cast<const block_q8_0x8*>(w);
#if TF_KERNELS_X86
  if (corrected_act) {  // one or a few activation rows on the VNNI path
    const auto* xc = reinterpret_cast<const block_q8_0c* const*>(xr);
    over_rows(8, [&](std::int64_t begin, std::int64_t end) {
      // Past four rows the weights go round again: 32 groups at a time, so from L2.
      for (std::int64_t g = begin / 8; g < end / 8; g += 32) {
        const std::int64_t groups = std::min<std::int64_t>(32, end / 8 - g);
        for (std::int64_t r0 = 0; r0 < p.b; r0 += 4)
          detail::matmat0c_rows8(w8 + g * dot_n, groups, xc + r0,
                                 std::min<std::int64_t>(4, p.b - r0), dot_n, p.y + r0 * p.n + g * 8,
                                 p.n);
      }
    });
    return;
  }
#endif
  // Other paths: 64 rows at a time back into row order, then the row-major kernels.
  over_rows(8, [&](std::int64_t begin, std::int64_t end) {
    thread_local std::vector<std::uint8_t> rows_back;
    auto* buf = reinterpret_cast<block_q8_0*>(detail::aligned_scratch(
        rows_back, 64 * dot_n * static_cast<std::int64_t>(sizeof(block_q8_0))));
    for (std::int64_t r = begin; r < end; r += 64) {
      const std::int64_t e = std::min(end, r + 64);
      rows8_to_rows(w8, dot_n, r / 8, e / 8, buf);
      run_rows(reinterpret_cast<const std::uint8_t*>(buf), r, e);
    }
  });
}

/// y_i = x W_i^T for up to four matrices that read the same one activation row (b = 1, row
/// order, as a layer's q/k/v or gate/up in decode), in one pass over the pool: one hand-off for
/// all of them, and the row quantized once per weight type. Each y_i has the bits matmul(ps[i])
/// gives; anything else (several rows, rows8, one thread) runs matmul on each in turn.
inline void matvec_group(std::span<const matmul_params> ps, thread_pool& pool,
                         isa path = default_isa()) {
  for (const auto& p : ps) detail::check_params(p);
  auto fusable = [&] {
    if (pool.size() == 1 || ps.size() < 2 || ps.size() > 4) return false;
    for (const auto& p : ps)
      if (p.b != 1 || p.n <= 0 || p.layout != weight_layout::rows || p.x != ps[0].x ||
          p.k != ps[0].k || act_format_of(p.w_type) == act_format::f32 ||
          !detail::matvec_for(p.w_type, path))
        return false;
    return true;
  };
  if (!fusable()) {
    for (const auto& p : ps) matmul(p, pool, path);
    return;
  }
  struct member {
    detail::matvec_fn mv;
    const std::uint8_t* w;
    std::int64_t wrb, n, dot_n, first;
    const std::uint8_t* xq;
    float* y;
  };
  std::array<member, 4> m{};
  const std::size_t count = ps.size();
  // One 64-byte aligned activation row per member; a member whose type came before shares it.
  thread_local std::vector<std::uint8_t> scratch;
  std::array<std::int64_t, 4> act_bytes{};  // each member's row, rounded up to whole lines
  std::int64_t need = 0;
  for (std::size_t i = 0; i < count; ++i) {
    act_bytes[i] = (detail::matvec_act_bytes(ps[i].w_type, ps[i].k, path) + 63) / 64 * 64;
    need += act_bytes[i];
  }
  std::uint8_t* at = detail::aligned_scratch(scratch, need);
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const auto& p = ps[i];
    const std::uint8_t* xq = nullptr;
    for (std::size_t j = 0; j < i && !xq; ++j)
      if (ps[j].w_type == p.w_type) xq = m[j].xq;
    if (!xq) {
      detail::quantize_matvec_act(p.w_type, p.x, p.k, at, path);
      xq = at;
      at += act_bytes[i];
    }
    const auto tr = tf::model::traits_of(p.w_type);
    m[i] = {
        detail::matvec_for(p.w_type, path),
        static_cast<const std::uint8_t*>(p.w),
        static_cast<std::int64_t>(tf::model::row_bytes(p.w_type, static_cast<std::uint64_t>(p.k))),
        p.n,
        p.k / tr.block_elems,
        rows,
        xq,
        p.y};
    rows += p.n;
  }
  // The members' rows end to end, in static chunks; a chunk runs its part of each member.
  pool.parallel_for(rows, [&](std::int64_t begin, std::int64_t end) {
    for (std::size_t i = 0; i < count; ++i) {
      const member& e = m[i];
      const std::int64_t b = std::max(begin, e.first), f = std::min(end, e.first + e.n);
      if (b < f)
        e.mv(e.w + (b - e.first) * e.wrb, e.wrb, f - b, e.xq, e.dot_n, e.y + (b - e.first));
    }
  });
}

}  // namespace tf::kernels::cpu
