#pragma once
/// The RMSNorm kernels: rmsnorm (per group of columns), residual (norm, add, norm) and
/// gated_rmsnorm. One block normalizes one group in norm_math's order (each thread's squares in
/// double, a fixed tree over the threads), so a row's bits depend on nothing but the row.
#include <kernels/portable/elementwise_math.hpp>
#include <kernels/cuda/launch.hpp>
#include <kernels/cuda/norm_math.hpp>

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {
namespace detail {

inline void norm_launched(char const* what) {
  cudaError_t const e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf: CUDA kernel ") + what +
                             " failed to launch: " + cudaGetErrorString(e));
}

// The block's total of its threads' partials, folded as norm_math::fold; every thread gets it.
__device__ inline double norm_block_sum(double partial, double* red) {
  int const t = static_cast<int>(threadIdx.x);
  red[t] = partial;
  __syncthreads();
  for (int s = static_cast<int>(blockDim.x) / 2; s > 0; s /= 2) {
    if (t < s) red[t] += red[t + s];
    __syncthreads();
  }
  double const total = red[0];
  __syncthreads();  // red is free for the block's next sum
  return total;
}

// 1 / rms of x [n] (each thread reads only the elements it later writes, so x may be rewritten).
__device__ inline float norm_inv_rms(float const* x, std::int64_t n, float eps, double* red) {
  int const t = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  return norm_math::inv_rms(norm_block_sum(norm_math::square_partial(x, n, t, threads), red), n,
                            eps);
}

// One block per group (blocks run row-major over rows, then groups); out may be x.
__global__ void norm_rmsnorm(float const* x, float const* w, std::int64_t w_size, float* out,
                             std::int64_t cols, std::int64_t group, float eps) {
  __shared__ double red[norm_math::max_threads];
  std::int64_t const groups = cols / group, b = blockIdx.x;
  std::int64_t const g0 = b % groups * group, base = b / groups * cols + g0;
  float const* xg = x + base;
  float* og = out + base;
  float const* wg = w + (w_size == group ? 0 : g0);
  float const inv = norm_inv_rms(xg, group, eps, red);
  for (std::int64_t i = threadIdx.x; i < group; i += blockDim.x)
    og[i] = norm_math::normed(xg[i], inv, wg[i]);
}

// One block per row.
__global__ void norm_residual(float* x, float* o, float const* post, float const* next,
                              std::int64_t cols, float eps) {
  __shared__ double red[norm_math::max_threads];
  float* xr = x + static_cast<std::int64_t>(blockIdx.x) * cols;
  float* orow = o + static_cast<std::int64_t>(blockIdx.x) * cols;
  if (post) {
    float const inv = norm_inv_rms(orow, cols, eps, red);
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      orow[i] = norm_math::normed(orow[i], inv, post[i]);
  }
  for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x) xr[i] += orow[i];
  if (next) {
    float const inv = norm_inv_rms(xr, cols, eps, red);
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
      orow[i] = norm_math::normed(xr[i], inv, next[i]);
  }
}

// One block per group, as norm_rmsnorm.
__global__ void norm_gated(float* y, float const* z, float const* w, std::int64_t w_size,
                           std::int64_t cols, std::int64_t group, float eps,
                           bool norm_before_gate) {
  __shared__ double red[norm_math::max_threads];
  std::int64_t const groups = cols / group, b = blockIdx.x;
  std::int64_t const g0 = b % groups * group, base = b / groups * cols + g0;
  float* yg = y + base;
  float const* zg = z + base;
  float const* wg = w + (w_size == group ? 0 : g0);
  if (!norm_before_gate)
    for (std::int64_t i = threadIdx.x; i < group; i += blockDim.x)
      yg[i] *= portable::elementwise_math::silu(zg[i]);
  float const inv = norm_inv_rms(yg, group, eps, red);
  for (std::int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    float v = norm_math::normed(yg[i], inv, wg[i]);
    if (norm_before_gate) v *= portable::elementwise_math::silu(zg[i]);
    yg[i] = v;
  }
}

// Blocks for `rows` rows of `cols` in groups of `group`, checked against the grid's limit.
inline unsigned norm_blocks(std::int64_t rows, std::int64_t cols, std::int64_t group,
                            std::int64_t w_size, char const* what) {
  if (rows < 0 || group <= 0 || cols % group != 0 || (w_size != group && w_size != cols))
    throw std::invalid_argument(std::string("tf: CUDA ") + what + " of " + std::to_string(rows) +
                                " x " + std::to_string(cols) + " in groups of " +
                                std::to_string(group) + " with " + std::to_string(w_size) +
                                " weights");
  std::int64_t const blocks = rows * (cols / group);
  if (blocks > INT_MAX)
    throw std::invalid_argument(std::string("tf: CUDA ") + what + " over " +
                                std::to_string(blocks) + " groups");
  return static_cast<unsigned>(blocks);
}

}  // namespace detail

void rmsnorm(float const* x, float const* w, std::int64_t w_size, float* out, std::int64_t rows,
             std::int64_t cols, std::int64_t group, float eps, stream_t s) {
  unsigned const blocks = detail::norm_blocks(rows, cols, group, w_size, "rmsnorm");
  if (blocks == 0) return;
  detail::norm_rmsnorm<<<blocks, norm_math::threads_for(group), 0, s>>>(x, w, w_size, out, cols,
                                                                        group, eps);
  detail::norm_launched("rmsnorm");
}

void residual(float* x, float* o, float const* post, float const* next, std::int64_t rows,
              std::int64_t cols, float eps, stream_t s) {
  if (rows <= 0 || cols <= 0) return;
  unsigned const blocks = detail::norm_blocks(rows, cols, cols, cols, "residual");
  detail::norm_residual<<<blocks, norm_math::threads_for(cols), 0, s>>>(x, o, post, next, cols,
                                                                        eps);
  detail::norm_launched("residual");
}

void gated_rmsnorm(float* y, float const* z, float const* w, std::int64_t w_size, std::int64_t rows,
                   std::int64_t cols, std::int64_t group, float eps, bool norm_before_gate,
                   stream_t s) {
  unsigned const blocks = detail::norm_blocks(rows, cols, group, w_size, "gated_rmsnorm");
  if (blocks == 0) return;
  detail::norm_gated<<<blocks, norm_math::threads_for(group), 0, s>>>(y, z, w, w_size, cols, group,
                                                                      eps, norm_before_gate);
  detail::norm_launched("gated_rmsnorm");
}

}  // namespace tf::kernels::cuda
