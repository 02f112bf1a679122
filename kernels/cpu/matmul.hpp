#pragma once
/// Quantized mat-vec / mat-mat: y[b, n] = sum_k x[b, k] * W[n, k], W rows in any GGUF quant type.
/// x is quantized once per call (Q8_0, Q8_1 or Q8_K by weight type); each output element is one
/// call of one dot routine, so results do not depend on the thread count or on the batch size.
#include <kernels/cpu/cpu_features.hpp>
#include <kernels/cpu/quantize.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <kernels/cpu/vec_dot.hpp>
#include <kernels/cpu/vec_dot_x86.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>

#include <cstdint>
#include <cstring>
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

using dot_fn = float (*)(const void* w, const void* x, std::int64_t n);

template <class W, class X, float (*F)(const W*, const X*, std::int64_t)>
float dot_as(const void* w, const void* x, std::int64_t n) {
  return F(static_cast<const W*>(w), static_cast<const X*>(x), n);
}

/// The dot routine for (type, path); `n` it takes is blocks, or elements for float types.
inline dot_fn dot_for(tf::model::tensor_type t, isa path) {
  using tf::model::tensor_type;
  namespace p = portable;
#if TF_KERNELS_X86
  if (path == isa::avx512) {
    switch (t) {
      case tensor_type::q4_0:
        return dot_as<block_q4_0, block_q8_0, avx512::dot_q4_0>;
      case tensor_type::q5_0:
        return dot_as<block_q5_0, block_q8_0, avx512::dot_q5_0>;
      case tensor_type::q8_0:
        return dot_as<block_q8_0, block_q8_0, avx512::dot_q8_0>;
      case tensor_type::q4_k:
        return dot_as<block_q4_k, block_q8_k, avx512::dot_q4_k>;
      case tensor_type::q5_k:
        return dot_as<block_q5_k, block_q8_k, avx512::dot_q5_k>;
      case tensor_type::q6_k:
        return dot_as<block_q6_k, block_q8_k, avx512::dot_q6_k>;
      case tensor_type::f32:
        return dot_as<float, float, avx512::dot_f32>;
      case tensor_type::f16:
        return dot_as<std::uint16_t, float, avx512::dot_f16>;
      default:
        break;
    }
  }
  if (path == isa::avx2 || path == isa::avx512) {
    switch (t) {
      case tensor_type::q4_0:
        return dot_as<block_q4_0, block_q8_0, avx2::dot_q4_0>;
      case tensor_type::q5_0:
        return dot_as<block_q5_0, block_q8_0, avx2::dot_q5_0>;
      case tensor_type::q8_0:
        return dot_as<block_q8_0, block_q8_0, avx2::dot_q8_0>;
      case tensor_type::q4_k:
        return dot_as<block_q4_k, block_q8_k, avx2::dot_q4_k>;
      case tensor_type::q5_k:
        return dot_as<block_q5_k, block_q8_k, avx2::dot_q5_k>;
      case tensor_type::q6_k:
        return dot_as<block_q6_k, block_q8_k, avx2::dot_q6_k>;
      case tensor_type::f32:
        return dot_as<float, float, avx2::dot_f32>;
      case tensor_type::f16:
        return dot_as<std::uint16_t, float, avx2::dot_f16>;
      default:
        break;
    }
  }
#else
  (void)path;
#endif
  switch (t) {
    case tensor_type::f32:
      return dot_as<float, float, p::dot_f32>;
    case tensor_type::f16:
      return dot_as<std::uint16_t, float, p::dot_f16>;
    case tensor_type::bf16:
      return dot_as<std::uint16_t, float, p::dot_bf16>;
    case tensor_type::q4_0:
      return dot_as<block_q4_0, block_q8_0, p::dot_q4_0>;
    case tensor_type::q4_1:
      return dot_as<block_q4_1, block_q8_1, p::dot_q4_1>;
    case tensor_type::q5_0:
      return dot_as<block_q5_0, block_q8_0, p::dot_q5_0>;
    case tensor_type::q5_1:
      return dot_as<block_q5_1, block_q8_1, p::dot_q5_1>;
    case tensor_type::q8_0:
      return dot_as<block_q8_0, block_q8_0, p::dot_q8_0>;
    case tensor_type::q8_1:
      return dot_as<block_q8_1, block_q8_0, p::dot_q8_1>;
    case tensor_type::q2_k:
      return dot_as<block_q2_k, block_q8_k, p::dot_q2_k>;
    case tensor_type::q3_k:
      return dot_as<block_q3_k, block_q8_k, p::dot_q3_k>;
    case tensor_type::q4_k:
      return dot_as<block_q4_k, block_q8_k, p::dot_q4_k>;
    case tensor_type::q5_k:
      return dot_as<block_q5_k, block_q8_k, p::dot_q5_k>;
    case tensor_type::q6_k:
      return dot_as<block_q6_k, block_q8_k, p::dot_q6_k>;
    case tensor_type::q8_k:
      return dot_as<block_q8_k, block_q8_k, p::dot_q8_k>;
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

/// Quantizes x [b, k] for weight type `t` into `dst` [b, act_row_bytes(t, k)] bytes.
inline void quantize_activations(tf::model::tensor_type t, const float* x, std::int64_t b,
                                 std::int64_t k, std::uint8_t* dst) {
  const std::int64_t rb = act_row_bytes(t, k);
  for (std::int64_t r = 0; r < b; ++r) {
    std::uint8_t* d = dst + r * rb;
    switch (act_format_of(t)) {
      case act_format::f32:
        std::memcpy(d, x + r * k, static_cast<std::size_t>(rb));
        break;
      case act_format::q8_0:
        quantize_row_q8_0(x + r * k, reinterpret_cast<block_q8_0*>(d), k);
        break;
      case act_format::q8_1:
        quantize_row_q8_1(x + r * k, reinterpret_cast<block_q8_1*>(d), k);
        break;
      case act_format::q8_k:
        quantize_row_q8_k(x + r * k, reinterpret_cast<block_q8_k*>(d), k);
        break;
    }
  }
}

/// y = x W^T on `pool`, over weight rows in static chunks, with the dot routines of `path`.
/// Throws tf::error if k is not a whole number of blocks or a pointer is missing.
inline void matmul(const matmul_params& p, thread_pool& pool, isa path = default_isa()) {
  const auto tr = tf::model::traits_of(p.w_type);
  if (p.n < 0 || p.b < 0 || p.k <= 0 || p.k % tr.block_elems != 0)
    throw tf::error(
        "tf::kernels::cpu::matmul: k={} is not a whole number of {}-element {} "
        "blocks (n={}, b={})",
        p.k, tr.block_elems, tr.name, p.n, p.b);
  if (p.n == 0 || p.b == 0) return;
  if (!p.w || !p.x || !p.y) throw tf::error("tf::kernels::cpu::matmul: null w, x or y");
  const detail::dot_fn dot = detail::dot_for(p.w_type, path);
  const bool float_act = act_format_of(p.w_type) == act_format::f32;
  const std::int64_t arb = act_row_bytes(p.w_type, p.k);
  const std::int64_t wrb =
      static_cast<std::int64_t>(tf::model::row_bytes(p.w_type, static_cast<std::uint64_t>(p.k)));
  const std::int64_t dot_n = float_act ? p.k : p.k / tr.block_elems;
  // Reused per calling thread: decode calls this hundreds of times per token.
  thread_local std::vector<std::uint8_t> scratch;
  const std::uint8_t* xq = reinterpret_cast<const std::uint8_t*>(p.x);
  if (!float_act) {
    if (scratch.size() < static_cast<std::size_t>(arb * p.b))
      scratch.resize(static_cast<std::size_t>(arb * p.b));
    quantize_activations(p.w_type, p.x, p.b, p.k, scratch.data());
    xq = scratch.data();
  }
  const auto* w = static_cast<const std::uint8_t*>(p.w);
  pool.parallel_for(p.n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::uint8_t* wr = w + row * wrb;
      for (std::int64_t r = 0; r < p.b; ++r) p.y[r * p.n + row] = dot(wr, xq + r * arb, dot_n);
    }
  });
}

}  // namespace tf::kernels::cpu
