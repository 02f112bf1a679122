#pragma once
/// The matmul and embedding kernels over GGUF weights, and the launchers launch.hpp declares for
/// them (supports, matmul, embed). A warp computes one output row for a tile of tokens: lane l
/// sums chunks l, l + 32, ... of the row, then the warp's butterfly adds the lane sums, exactly as
/// matvec_row_reference (kernels/cuda/quant.hpp) does on the host, whatever the batch or grid.
#include <kernels/portable/hd.hpp>
#include <kernels/cuda/launch.hpp>
#include <kernels/cuda/quant.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {

namespace detail {

/// Output rows per matmul block, one warp each.
inline constexpr int matmul_warps = 8;
/// Threads per matmul block.
inline constexpr int matmul_threads = matmul_warps * warp_lanes;
/// Tokens per matmul block: each dequantized chunk is used for all of them.
inline constexpr int matmul_tokens = 8;
/// Chunks of x staged in shared memory per pass: one per lane.
inline constexpr int stage_chunks = warp_lanes;
/// A staged chunk's stride in floats: one more than its length, so that the lanes' chunks start
/// in 32 different banks.
inline constexpr int stage_stride = chunk_elems + 1;

/// y[t, r] = dot(row r of w, x[t]) for the block's rows and token tiles (grid: row groups x token
/// tiles, striding over the tokens when there are more tiles than blocks in y).
template <std::uint32_t Type>
__global__ void __launch_bounds__(matmul_threads)
    matmul_kernel(std::uint8_t const* __restrict__ w, std::uint64_t row_bytes, std::int64_t rows,
                  std::int64_t cols, float const* __restrict__ x, float* __restrict__ y,
                  std::int64_t n) {
  __shared__ float xs[matmul_tokens][stage_chunks * stage_stride];
  constexpr int stage_elems = stage_chunks * chunk_elems;
  const int lane = static_cast<int>(threadIdx.x) % warp_lanes;
  const std::int64_t r =
      static_cast<std::int64_t>(blockIdx.x) * matmul_warps + threadIdx.x / warp_lanes;
  const bool has_row = r < rows;
  std::uint8_t const* row = w + (has_row ? r : 0) * static_cast<std::int64_t>(row_bytes);
  const std::int64_t chunks = chunk_count(cols);

  for (std::int64_t t0 = static_cast<std::int64_t>(blockIdx.y) * matmul_tokens; t0 < n;
       t0 += static_cast<std::int64_t>(gridDim.y) * matmul_tokens) {
    const int tokens = static_cast<int>(n - t0 < matmul_tokens ? n - t0 : matmul_tokens);
    float acc[matmul_tokens];
#pragma unroll
    for (int t = 0; t < matmul_tokens; ++t) acc[t] = 0.0f;

    for (std::int64_t first_chunk = 0; first_chunk < chunks; first_chunk += stage_chunks) {
      __syncthreads();  // the previous pass has finished reading xs
      const std::int64_t first = first_chunk * chunk_elems;
      for (int i = static_cast<int>(threadIdx.x); i < tokens * stage_elems;
           i += static_cast<int>(blockDim.x)) {
        const int t = i / stage_elems, e = i % stage_elems;
        if (first + e < cols)
          xs[t][(e / chunk_elems) * stage_stride + e % chunk_elems] =
              x[(t0 + t) * cols + first + e];
      }
      __syncthreads();

      const std::int64_t c = first_chunk + lane;
      if (has_row && c < chunks) {
        const int len = chunk_length(cols, c);
        float wc[chunk_elems];
        dequant_chunk<Type>(row, c, len, wc);
#pragma unroll
        for (int t = 0; t < matmul_tokens; ++t)
          if (t < tokens) acc[t] = chunk_dot(acc[t], wc, &xs[t][lane * stage_stride], len);
      }
    }

#pragma unroll
    for (int t = 0; t < matmul_tokens; ++t) {
      float v = acc[t];
#pragma unroll
      for (int offset = warp_lanes / 2; offset > 0; offset /= 2)
        v = combine_lanes(v, __shfl_xor_sync(0xffffffffu, v, offset));
      if (has_row && lane == 0 && t < tokens) y[(t0 + t) * rows + r] = v;
    }
  }
}

/// x[t] = scale * row tokens[t] of w, one thread per (token, chunk); a token outside w's rows
/// gives a row of NaN rather than a read outside w.
template <std::uint32_t Type>
__global__ void embed_kernel(std::uint8_t const* __restrict__ w, std::uint64_t row_bytes,
                             std::int64_t rows, std::int64_t cols,
                             std::int32_t const* __restrict__ tokens, std::int64_t n, float scale,
                             float* __restrict__ x) {
  const std::int64_t chunks = chunk_count(cols);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n * chunks; i += stride) {
    const std::int64_t t = i / chunks, c = i % chunks;
    const std::int64_t token = tokens[t];
    const int len = chunk_length(cols, c);
    float* out = x + t * cols + c * chunk_elems;
    float v[chunk_elems];
    if (token >= 0 && token < rows) {
      dequant_chunk<Type>(w + token * static_cast<std::int64_t>(row_bytes), c, len, v);
    } else {
#pragma unroll
      for (int j = 0; j < chunk_elems; ++j) v[j] = __uint_as_float(0x7fc00000u);
    }
#pragma unroll
    for (int j = 0; j < chunk_elems; ++j)
      if (j < len) out[j] = scale == 1.0f ? v[j] : v[j] * scale;  // as the CPU backend's embed
  }
}

/// Calls f.template operator()<T>() with T = type; the type must be supported.
template <class F>
void dispatch_type(std::uint32_t type, F&& f) {
  using namespace gguf_type;
  switch (type) {
    // clang-format off
    case f32: return f.template operator()<f32>();
    case f16: return f.template operator()<f16>();
    case bf16: return f.template operator()<bf16>();
    case q4_0: return f.template operator()<q4_0>();
    case q4_1: return f.template operator()<q4_1>();
    case q5_0: return f.template operator()<q5_0>();
    case q5_1: return f.template operator()<q5_1>();
    case q8_0: return f.template operator()<q8_0>();
    case q2_k: return f.template operator()<q2_k>();
    case q3_k: return f.template operator()<q3_k>();
    case q4_k: return f.template operator()<q4_k>();
    case q5_k: return f.template operator()<q5_k>();
    case q6_k: return f.template operator()<q6_k>();
    case q8_k: return f.template operator()<q8_k>();
    // clang-format on
    default:
      return;
  }
}

/// Throws unless w is a readable matrix: a supported type, whole blocks per row, rows long enough.
inline void check_weight(weight const& w, char const* launcher) {
  const std::string where = std::string("tf::kernels::cuda::") + launcher + ": ";
  if (!supported(w.type))
    throw std::runtime_error(where + "no CUDA kernel reads GGUF type " + std::to_string(w.type));
  if (w.rows < 0 || w.cols < 0)
    throw std::runtime_error(where + "negative shape " + std::to_string(w.rows) + " x " +
                             std::to_string(w.cols));
  const int elems = block_elems(w.type);
  if (w.cols % elems != 0)
    throw std::runtime_error(where + std::to_string(w.cols) + " columns of GGUF type " +
                             std::to_string(w.type) + " are not whole " + std::to_string(elems) +
                             "-element blocks");
  const auto need = static_cast<std::uint64_t>(w.cols / elems * block_bytes(w.type));
  if (w.row_bytes < need)
    throw std::runtime_error(where + "rows of " + std::to_string(w.row_bytes) +
                             " bytes are shorter than " + std::to_string(w.cols) +
                             " elements of GGUF type " + std::to_string(w.type) + " (" +
                             std::to_string(need) + " bytes)");
  if (w.rows > 0 && w.cols > 0 && w.data == nullptr)
    throw std::runtime_error(where + "no weight data");
}

/// Throws with the pending launch error, if any.
inline void check_launch(char const* launcher) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf::kernels::cuda::") + launcher +
                             ": kernel launch failed: " + cudaGetErrorString(e));
}

/// Most blocks in a grid's y dimension (CUDA's limit).
inline constexpr std::int64_t max_grid_y = 65535;
/// Threads per embedding block, and the most blocks a launch uses (the kernel strides).
inline constexpr int embed_threads = 256;
inline constexpr std::int64_t max_embed_blocks = 65536;

}  // namespace detail

bool supports(std::uint32_t type) {
  return supported(type);
}

void matmul(weight const& w, float const* x, float* y, std::int64_t n, stream_t s) {
  detail::check_weight(w, "matmul");
  if (n < 0) throw std::runtime_error("tf::kernels::cuda::matmul: negative token count");
  if (n == 0 || w.rows == 0) return;
  const dim3 grid(
      static_cast<unsigned>((w.rows + detail::matmul_warps - 1) / detail::matmul_warps),
      static_cast<unsigned>(
          std::min((n + detail::matmul_tokens - 1) / detail::matmul_tokens, detail::max_grid_y)));
  const dim3 block(detail::matmul_threads);
  auto const* data = static_cast<std::uint8_t const*>(w.data);
  detail::dispatch_type(w.type, [&]<std::uint32_t T>() {
    detail::matmul_kernel<T><<<grid, block, 0, s>>>(data, w.row_bytes, w.rows, w.cols, x, y, n);
  });
  detail::check_launch("matmul");
}

void embed(weight const& w, std::int32_t const* tokens, std::int64_t n, float scale, float* x,
           stream_t s) {
  detail::check_weight(w, "embed");
  if (n < 0) throw std::runtime_error("tf::kernels::cuda::embed: negative token count");
  const std::int64_t work = n * chunk_count(w.cols);
  if (work == 0) return;
  const auto blocks = std::min((work + detail::embed_threads - 1) / detail::embed_threads,
                               detail::max_embed_blocks);
  auto const* data = static_cast<std::uint8_t const*>(w.data);
  detail::dispatch_type(w.type, [&]<std::uint32_t T>() {
    detail::embed_kernel<T><<<static_cast<unsigned>(blocks), detail::embed_threads, 0, s>>>(
        data, w.row_bytes, w.rows, w.cols, tokens, n, scale, x);
  });
  detail::check_launch("embed");
}

}  // namespace tf::kernels::cuda
