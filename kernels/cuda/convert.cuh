#pragma once
/// The cuBLASLt path's conversion kernels and their launchers (round_rows, dequantize_rows): f32
/// activations rounded to a weight's 16-bit type, and a slab of a quantized weight's rows
/// dequantized into half tiles. Each output element is one thread's convert_math.hpp expression of
/// its own input, so nothing depends on the grid, the slab or the batch.
#include <kernels/cuda/convert_math.hpp>
#include <kernels/cuda/launch.hpp>
#include <kernels/cuda/matmul.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {
namespace detail {

inline constexpr int convert_threads = 256;
inline constexpr std::int64_t max_convert_blocks = 65536;

inline unsigned convert_blocks(std::int64_t work) {
  return static_cast<unsigned>(
      std::min((work + convert_threads - 1) / convert_threads, max_convert_blocks));
}

/// dst[i] = src[i] rounded to `kind`, grid-stride.
__global__ void round_rows_kernel(float const* __restrict__ src, std::uint16_t* __restrict__ dst,
                                  std::int64_t n, half_kind kind) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = round_to_half(src[i], kind);
}

/// dst row r = row first + r of w dequantized and rounded, one thread per (row, chunk).
template <std::uint32_t Type>
__global__ void dequantize_rows_kernel(std::uint8_t const* __restrict__ w, std::uint64_t row_bytes,
                                       std::int64_t cols, std::int64_t first, std::int64_t count,
                                       half_kind kind, std::uint16_t* __restrict__ dst) {
  const std::int64_t chunks = chunk_count(cols);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count * chunks; i += stride) {
    const std::int64_t r = i / chunks, c = i % chunks;
    const int len = chunk_length(cols, c);
    std::uint16_t out[chunk_elems];
    dequant_chunk_half<Type>(w + (first + r) * static_cast<std::int64_t>(row_bytes), c, len, kind,
                             out);
    std::uint16_t* to = dst + r * cols + c * chunk_elems;
#pragma unroll
    for (int j = 0; j < chunk_elems; ++j)
      if (j < len) to[j] = out[j];
  }
}

}  // namespace detail

void round_rows(float const* src, std::uint16_t* dst, std::int64_t n, half_kind kind, stream_t s) {
  if (n < 0) throw std::runtime_error("tf::kernels::cuda::round_rows: negative element count");
  if (n == 0) return;
  detail::round_rows_kernel<<<detail::convert_blocks(n), detail::convert_threads, 0, s>>>(src, dst,
                                                                                          n, kind);
  detail::check_launch("round_rows");
}

void dequantize_rows(weight const& w, std::int64_t first, std::int64_t count, half_kind kind,
                     std::uint16_t* dst, stream_t s) {
  detail::check_weight(w, "dequantize_rows");
  if (first < 0 || count < 0 || first + count > w.rows)
    throw std::runtime_error("tf::kernels::cuda::dequantize_rows: rows [" + std::to_string(first) +
                             ", " + std::to_string(first + count) + ") of a weight of " +
                             std::to_string(w.rows) + " rows");
  const std::int64_t work = count * chunk_count(w.cols);
  if (work == 0) return;
  auto const* data = static_cast<std::uint8_t const*>(w.data);
  detail::dispatch_type(w.type, [&]<std::uint32_t T>() {
    detail::dequantize_rows_kernel<T>
        <<<detail::convert_blocks(work), detail::convert_threads, 0, s>>>(data, w.row_bytes, w.cols,
                                                                          first, count, kind, dst);
  });
  detail::check_launch("dequantize_rows");
}

}  // namespace tf::kernels::cuda
