#pragma once
/// The RoPE kernel: one thread per rotated pair, with the row's cos and sin from the host's
/// table, in elementwise_math's rotations (NeoX pairs (i, i + dims/2), interleaved (2i, 2i + 1)).
#include <kernels/portable/elementwise_math.hpp>
#include <kernels/cuda/launch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {
namespace detail {

inline constexpr int rope_threads = 256;

// n = rows * heads * (dims / 2) pairs, pair-fastest; x [rows, heads, head_dim], cs [rows, dims].
__global__ void rope_pairs(float* x, float const* cs, std::int64_t n, std::int64_t heads,
                           int head_dim, int dims, bool neox) {
  int const half = dims / 2;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    int const pair = static_cast<int>(i % half);
    std::int64_t const head = i / half;  // row * heads + h
    float* xh = x + head * head_dim;
    float const* c = cs + head / heads * dims;
    int const a = neox ? pair : 2 * pair, b = neox ? pair + half : 2 * pair + 1;
    float x0 = xh[a], x1 = xh[b];
    if (neox)
      portable::elementwise_math::rotate_neox(x0, x1, c[pair], c[half + pair]);
    else
      portable::elementwise_math::rotate_interleaved(x0, x1, c[pair], c[half + pair]);
    xh[a] = x0;
    xh[b] = x1;
  }
}

}  // namespace detail

void rope(float* x, float const* cs, std::int64_t rows, std::int64_t heads, int head_dim, int dims,
          rope_style style, stream_t s) {
  if (dims <= 0 || dims % 2 != 0 || dims > head_dim || heads < 0 || rows < 0)
    throw std::invalid_argument("tf: CUDA rope of " + std::to_string(dims) +
                                " dims over heads of " + std::to_string(head_dim));
  std::int64_t const n = rows * heads * (dims / 2);
  if (n == 0) return;
  auto const blocks = static_cast<unsigned>(
      std::min<std::int64_t>((n + detail::rope_threads - 1) / detail::rope_threads, 65536));
  detail::rope_pairs<<<blocks, detail::rope_threads, 0, s>>>(x, cs, n, heads, head_dim, dims,
                                                             style == rope_style::neox);
  cudaError_t const e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf: CUDA kernel rope failed to launch: ") +
                             cudaGetErrorString(e));
}

}  // namespace tf::kernels::cuda
