#pragma once
/// The element-by-element kernels: adds, biases, activations and gated units, sigmoid gates,
/// softcaps, column slices, row gathers and scatters, and the MoE's per-token combine. Every
/// output element is one thread's fixed expression of elementwise_math over its own inputs
/// (grid-stride loops), so nothing depends on the grid or on the other rows.
#include <kernels/portable/elementwise_math.hpp>
#include <kernels/cuda/launch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace tf::kernels::cuda {
namespace detail {

inline constexpr int ew_threads = 256;

inline void ew_launched(char const* what) {
  cudaError_t const e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf: CUDA kernel ") + what +
                             " failed to launch: " + cudaGetErrorString(e));
}

// Blocks for n elements; the grid-stride loops cover whatever the cap leaves.
inline unsigned ew_blocks(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + ew_threads - 1) / ew_threads, 65536));
}

__device__ inline std::int64_t ew_first() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t ew_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

template <act_kind A>
__device__ inline float ew_act(float x) {
  if constexpr (A == act_kind::gelu_tanh)
    return portable::elementwise_math::gelu_tanh(x);
  else if constexpr (A == act_kind::silu)
    return portable::elementwise_math::silu(x);
  else
    return portable::elementwise_math::relu2(x);
}

// launch(integral_constant<act_kind, act>) for the runtime act.
template <class Launch>
void ew_by_act(act_kind act, Launch&& launch) {
  switch (act) {
    case act_kind::gelu_tanh:
      return launch(std::integral_constant<act_kind, act_kind::gelu_tanh>{});
    case act_kind::silu:
      return launch(std::integral_constant<act_kind, act_kind::silu>{});
    case act_kind::relu2:
      return launch(std::integral_constant<act_kind, act_kind::relu2>{});
  }
  throw std::invalid_argument("tf: CUDA kernels got an unknown activation");
}

__global__ void ew_add(float* x, float const* y, std::int64_t n) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) x[i] += y[i];
}

__global__ void ew_scale(float* x, std::int64_t n, float factor) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) x[i] *= factor;
}

__global__ void ew_add_bias(float* y, float const* b, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) y[i] += b[i % cols];
}

template <act_kind A>
__global__ void ew_glu(float* g, float const* u, std::int64_t n) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) g[i] = ew_act<A>(g[i]) * u[i];
}

template <act_kind A>
__global__ void ew_glu_merged(float const* gu, float* g, std::int64_t n, std::int64_t ff) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) {
    float const* row = gu + i / ff * 2 * ff;
    std::int64_t const c = i % ff;
    g[i] = ew_act<A>(row[c]) * row[ff + c];
  }
}

template <act_kind A>
__global__ void ew_activate(float* x, std::int64_t n) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) x[i] = ew_act<A>(x[i]);
}

__global__ void ew_sigmoid_gate(float* x, float const* gate, std::int64_t n) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride())
    x[i] *= portable::elementwise_math::sigmoid(gate[i]);
}

// n = rows * groups * count outputs; output column c is column first + c % count of group
// c / count.
__global__ void ew_columns(float const* src, float* dst, std::int64_t n, std::int64_t src_cols,
                           std::int64_t first, std::int64_t count, std::int64_t period,
                           std::int64_t dst_cols) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) {
    std::int64_t const r = i / dst_cols, c = i % dst_cols;
    dst[i] = src[r * src_cols + c / count * period + first + c % count];
  }
}

__global__ void ew_softcap(float* x, std::int64_t n, float cap) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride())
    x[i] = portable::elementwise_math::softcap(x[i], cap);
}

__global__ void ew_gather_rows(float const* src, std::int64_t const* idx, std::int64_t n,
                               std::int64_t cols, float* dst) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride())
    dst[i] = src[idx[i / cols] * cols + i % cols];
}

__global__ void ew_scatter_rows(float const* y, std::int64_t const* idx, std::int64_t n,
                                std::int64_t cols, float* dst) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride())
    dst[idx[i / cols] * cols + i % cols] = y[i];
}

// n = tokens * cols outputs; token t's picks are rows t k .. t k + k - 1 of y.
__global__ void ew_moe_combine(float const* y, float const* weight, std::int64_t n, int k,
                               std::int64_t cols, float* out) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) {
    std::int64_t const t = i / cols, c = i % cols;
    out[i] = portable::elementwise_math::weighted_picks(weight + t * k, y + t * k * cols + c, cols, k);
  }
}

__global__ void ew_add_scaled(float* out, float const* y, float const* gate, std::int64_t n,
                              std::int64_t cols) {
  for (std::int64_t i = ew_first(); i < n; i += ew_stride()) {
    float const scale = gate ? portable::elementwise_math::sigmoid(gate[i / cols]) : 1.0f;
    out[i] = portable::elementwise_math::add_scaled(out[i], y[i], scale);
  }
}

}  // namespace detail

void add(float* x, float const* y, std::int64_t n, stream_t s) {
  if (n <= 0) return;
  detail::ew_add<<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(x, y, n);
  detail::ew_launched("add");
}

void scale(float* x, std::int64_t n, float factor, stream_t s) {
  if (n <= 0) return;
  detail::ew_scale<<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(x, n, factor);
  detail::ew_launched("scale");
}

void add_bias(float* y, float const* b, std::int64_t rows, std::int64_t cols, stream_t s) {
  if (rows <= 0 || cols <= 0) return;
  std::int64_t const n = rows * cols;
  detail::ew_add_bias<<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(y, b, n, cols);
  detail::ew_launched("add_bias");
}

void glu(act_kind act, float* g, float const* u, std::int64_t n, stream_t s) {
  if (n <= 0) return;
  detail::ew_by_act(act, [&](auto a) {
    detail::ew_glu<decltype(a)::value><<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(g, u, n);
  });
  detail::ew_launched("glu");
}

void glu_merged(act_kind act, float const* gu, float* g, std::int64_t rows, std::int64_t ff,
                stream_t s) {
  if (rows <= 0 || ff <= 0) return;
  std::int64_t const n = rows * ff;
  detail::ew_by_act(act, [&](auto a) {
    detail::ew_glu_merged<decltype(a)::value>
        <<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(gu, g, n, ff);
  });
  detail::ew_launched("glu_merged");
}

void activate(act_kind act, float* x, std::int64_t n, stream_t s) {
  if (n <= 0) return;
  detail::ew_by_act(act, [&](auto a) {
    detail::ew_activate<decltype(a)::value>
        <<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(x, n);
  });
  detail::ew_launched("activate");
}

void sigmoid_gate(float* x, float const* gate, std::int64_t n, stream_t s) {
  if (n <= 0) return;
  detail::ew_sigmoid_gate<<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(x, gate, n);
  detail::ew_launched("sigmoid_gate");
}

void columns(float const* src, float* dst, std::int64_t rows, std::int64_t src_cols,
             std::int64_t first, std::int64_t count, std::int64_t period, stream_t s) {
  // period <= 0 takes the whole row as one group, as the CPU backend's columns does.
  std::int64_t const per = period > 0 ? period : src_cols;
  if (rows < 0 || per <= 0 || src_cols % per != 0 || first < 0 || count < 0 || first + count > per)
    throw std::invalid_argument("tf: CUDA columns " + std::to_string(first) + ".." +
                                std::to_string(first + count) + " of period " +
                                std::to_string(per) + " from rows of " + std::to_string(src_cols));
  std::int64_t const dst_cols = src_cols / per * count, n = rows * dst_cols;
  if (n <= 0) return;
  detail::ew_columns<<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(
      src, dst, n, src_cols, first, count, per, dst_cols);
  detail::ew_launched("columns");
}

void softcap(float* x, std::int64_t n, float cap, stream_t s) {
  if (n <= 0) return;
  detail::ew_softcap<<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(x, n, cap);
  detail::ew_launched("softcap");
}

void gather_rows(float const* src, std::int64_t const* idx, std::int64_t n, std::int64_t cols,
                 float* dst, stream_t s) {
  if (n <= 0 || cols <= 0) return;
  std::int64_t const total = n * cols;
  detail::ew_gather_rows<<<detail::ew_blocks(total), detail::ew_threads, 0, s>>>(src, idx, total,
                                                                                 cols, dst);
  detail::ew_launched("gather_rows");
}

void scatter_rows(float const* y, std::int64_t const* idx, std::int64_t n, std::int64_t cols,
                  float* dst, stream_t s) {
  if (n <= 0 || cols <= 0) return;
  std::int64_t const total = n * cols;
  detail::ew_scatter_rows<<<detail::ew_blocks(total), detail::ew_threads, 0, s>>>(y, idx, total,
                                                                                  cols, dst);
  detail::ew_launched("scatter_rows");
}

void moe_combine(float const* y, float const* weight, std::int64_t n, int k, std::int64_t cols,
                 float* out, stream_t s) {
  if (n <= 0 || cols <= 0) return;
  if (k < 0) throw std::invalid_argument("tf: CUDA moe_combine of " + std::to_string(k) + " picks");
  std::int64_t const total = n * cols;
  detail::ew_moe_combine<<<detail::ew_blocks(total), detail::ew_threads, 0, s>>>(y, weight, total,
                                                                                 k, cols, out);
  detail::ew_launched("moe_combine");
}

void add_scaled(float* out, float const* y, float const* gate, std::int64_t rows, std::int64_t cols,
                stream_t s) {
  if (rows <= 0 || cols <= 0) return;
  std::int64_t const n = rows * cols;
  detail::ew_add_scaled<<<detail::ew_blocks(n), detail::ew_threads, 0, s>>>(out, y, gate, n, cols);
  detail::ew_launched("add_scaled");
}

}  // namespace tf::kernels::cuda
