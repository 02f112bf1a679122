#pragma once
/// The paged KV kernels: kv_write (f32 rows into f16 or f32 pages), kv_copy_page, and attend, one
/// block per (token, query head) walking its keys in tiles with an online softmax in
/// attention_math's order. With an f16 cache the keys and values are read as halves and converted
/// exactly; q, the scores, the probabilities and the sums stay in f32 (the CPU backend instead
/// rounds q and the probabilities to f16 as llama.cpp's CPU path does, so the two differ by that
/// rounding).
#include <kernels/cuda/attention_math.hpp>
#include <kernels/cuda/launch.hpp>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {
namespace detail {

inline constexpr int attn_threads = 128;
inline constexpr int attn_warps = attn_threads / attention_math::lanes;
// Output dimensions each thread accumulates.
inline constexpr int attn_dims_per_thread = attention_math::max_head_dim / attn_threads;

inline void attn_launched(char const* what) {
  cudaError_t const e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf: CUDA kernel ") + what +
                             " failed to launch: " + cudaGetErrorString(e));
}

inline void attn_check_layer(kv_layer const& kv, char const* what) {
  if (!kv.k || !kv.v || kv.page_tokens <= 0 || kv.kv_heads <= 0 || kv.head_dim <= 0)
    throw std::invalid_argument(std::string("tf: CUDA ") + what + " over a KV layer of " +
                                std::to_string(kv.kv_heads) + " heads of " +
                                std::to_string(kv.head_dim) + " in pages of " +
                                std::to_string(kv.page_tokens));
}

// Element offset of position p's row in a layer's pages, for a row whose page table is `table`.
__device__ inline std::int64_t attn_row_at(std::int32_t const* table, std::int32_t p,
                                           int page_tokens, std::int64_t kv_dim) {
  return (static_cast<std::int64_t>(table[p / page_tokens]) * page_tokens + p % page_tokens) *
         kv_dim;
}

__device__ inline void attn_store(float* dst, float v) {
  *dst = v;
}
__device__ inline void attn_store(__half* dst, float v) {
  *dst = __float2half_rn(v);
}

// n = tokens * kv_dim elements; each writes its K and V element at its token's position.
template <class T>
__global__ void attn_kv_write(T* K, T* V, token_places at, float const* k, float const* v,
                              std::int64_t n, std::int64_t kv_dim, int page_tokens) {
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t const t = i / kv_dim;
    std::int64_t const at_row =
        attn_row_at(at.pages + at.table[t], at.pos[t], page_tokens, kv_dim) + i % kv_dim;
    attn_store(K + at_row, k[i]);
    attn_store(V + at_row, v[i]);
  }
}

// Block b is query head b % heads of token b / heads. Per tile of keys: the tile's row pointers,
// one warp per key for the scores, then the online-softmax update, every thread holding the same
// running max and sum and its own output dimensions d = thread + attn_threads i.
template <class T>
__global__ void __launch_bounds__(attn_threads)
    attn_attend(T const* K, T const* V, int page_tokens, int kv_heads, int head_dim,
                token_places at, float const* q, float* out, int heads, float scale, int window,
                float cap) {
  namespace am = attention_math;
  __shared__ float qs[am::max_head_dim];
  __shared__ float sc[am::tile_keys], pr[am::tile_keys];
  __shared__ T const* k_rows[am::tile_keys];
  __shared__ T const* v_rows[am::tile_keys];
  int const tid = static_cast<int>(threadIdx.x), lane = tid % am::lanes, warp = tid / am::lanes;
  std::int64_t const t = blockIdx.x / heads;
  int const h = static_cast<int>(blockIdx.x % heads);
  std::int64_t const kv_dim = static_cast<std::int64_t>(kv_heads) * head_dim;
  std::int64_t const head_at = static_cast<std::int64_t>(h / (heads / kv_heads)) * head_dim;
  std::int64_t const q_at = (t * heads + h) * head_dim;
  for (int d = tid; d < head_dim; d += attn_threads) qs[d] = q[q_at + d] * scale;
  std::int32_t const* table = at.pages + at.table[t];
  std::int32_t const pos = at.pos[t];
  std::int32_t const lo = window > 0 ? max(0, pos - window + 1) : 0;
  float acc[attn_dims_per_thread] = {};
  float run_max = -INFINITY, run_sum = 0.0f;
  for (std::int32_t j0 = lo; j0 <= pos; j0 += am::tile_keys) {
    int const count = min(am::tile_keys, pos - j0 + 1);
    if (tid < count) {
      std::int64_t const row = attn_row_at(table, j0 + tid, page_tokens, kv_dim) + head_at;
      k_rows[tid] = K + row;
      v_rows[tid] = V + row;
    }
    __syncthreads();  // the rows (and, before the first tile, qs) are in place
    for (int j = warp; j < count; j += attn_warps) {
      float dot = am::lane_dot(qs, k_rows[j], head_dim, lane);
      for (int o = am::lanes / 2; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      if (lane == 0) sc[j] = am::score(dot, cap);
    }
    __syncthreads();
    float const new_max = am::tile_max(sc, count, run_max);
    float const corr = am::rescale(run_max, new_max);
    if (tid < count) pr[tid] = am::weight(sc[tid], new_max);
    __syncthreads();
    run_sum = am::next_sum(run_sum, corr, pr, count);
#pragma unroll
    for (int i = 0; i < attn_dims_per_thread; ++i) {
      int const d = tid + attn_threads * i;
      if (d < head_dim) acc[i] = am::accumulate(acc[i], corr, pr, v_rows, d, count);
    }
    run_max = new_max;
    __syncthreads();  // the next tile rewrites the rows, scores and weights
  }
#pragma unroll
  for (int i = 0; i < attn_dims_per_thread; ++i) {
    int const d = tid + attn_threads * i;
    if (d < head_dim) out[q_at + d] = acc[i] / run_sum;
  }
}

}  // namespace detail

void kv_write(kv_layer const& kv, token_places const& at, float const* k, float const* v,
              std::int64_t n, stream_t s) {
  detail::attn_check_layer(kv, "kv_write");
  if (n <= 0) return;
  std::int64_t const kv_dim = static_cast<std::int64_t>(kv.kv_heads) * kv.head_dim;
  std::int64_t const total = n * kv_dim;
  auto const blocks = static_cast<unsigned>(std::min<std::int64_t>((total + 255) / 256, 65536));
  if (kv.f16)
    detail::attn_kv_write<<<blocks, 256, 0, s>>>(static_cast<__half*>(kv.k),
                                                 static_cast<__half*>(kv.v), at, k, v, total,
                                                 kv_dim, kv.page_tokens);
  else
    detail::attn_kv_write<<<blocks, 256, 0, s>>>(static_cast<float*>(kv.k),
                                                 static_cast<float*>(kv.v), at, k, v, total, kv_dim,
                                                 kv.page_tokens);
  detail::attn_launched("kv_write");
}

void kv_copy_page(kv_layer const& kv, std::int32_t from, std::int32_t to, stream_t s) {
  detail::attn_check_layer(kv, "kv_copy_page");
  if (from < 0 || to < 0)
    throw std::invalid_argument("tf: CUDA kv_copy_page " + std::to_string(from) + " -> " +
                                std::to_string(to));
  if (from == to) return;
  std::size_t const bytes = static_cast<std::size_t>(kv.page_tokens) *
                            static_cast<std::size_t>(kv.kv_heads) *
                            static_cast<std::size_t>(kv.head_dim) * (kv.f16 ? 2u : 4u);
  for (void* base : {kv.k, kv.v}) {
    auto* bytes_at = static_cast<char*>(base);
    cudaError_t const e = cudaMemcpyAsync(bytes_at + static_cast<std::size_t>(to) * bytes,
                                          bytes_at + static_cast<std::size_t>(from) * bytes, bytes,
                                          cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("tf: CUDA kv_copy_page failed: ") +
                               cudaGetErrorString(e));
  }
}

void attend(kv_layer const& kv, token_places const& at, float const* q, float* out, std::int64_t n,
            int heads, float scale, int window, float softcap, stream_t s) {
  detail::attn_check_layer(kv, "attend");
  if (kv.head_dim > attention_math::max_head_dim || heads <= 0 || heads % kv.kv_heads != 0)
    throw std::invalid_argument("tf: CUDA attend of " + std::to_string(heads) + " heads over " +
                                std::to_string(kv.kv_heads) + " KV heads of " +
                                std::to_string(kv.head_dim) + " (at most " +
                                std::to_string(attention_math::max_head_dim) + ")");
  if (n <= 0) return;
  if (n * heads > INT_MAX)
    throw std::invalid_argument("tf: CUDA attend over " + std::to_string(n) + " tokens x " +
                                std::to_string(heads) + " heads");
  auto const blocks = static_cast<unsigned>(n * heads);
  if (kv.f16)
    detail::attn_attend<<<blocks, detail::attn_threads, 0, s>>>(
        static_cast<__half const*>(kv.k), static_cast<__half const*>(kv.v), kv.page_tokens,
        kv.kv_heads, kv.head_dim, at, q, out, heads, scale, window, softcap);
  else
    detail::attn_attend<<<blocks, detail::attn_threads, 0, s>>>(
        static_cast<float const*>(kv.k), static_cast<float const*>(kv.v), kv.page_tokens,
        kv.kv_heads, kv.head_dim, at, q, out, heads, scale, window, softcap);
  detail::attn_launched("attend");
}

}  // namespace tf::kernels::cuda
