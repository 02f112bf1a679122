#pragma once
/// The recurrent kernels: conv1d, the Mamba2 scan and the gated delta rule over one batch row's
/// tokens, in recurrent_math's order. conv1d steps through the tokens 16 at a time (its outputs
/// read only inputs); the scans step token by token, their state in registers from the first token
/// to the last, each token's inputs read one token ahead.
#include <kernels/cuda/launch.hpp>
#include <kernels/cuda/recurrent_math.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {
namespace detail {

inline void recurrent_launched(char const* what) {
  cudaError_t const e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf: CUDA kernel ") + what +
                             " failed to launch: " + cudaGetErrorString(e));
}

inline void recurrent_require(bool ok, char const* what) {
  if (!ok) throw std::runtime_error(std::string("tf: CUDA ") + what);
}

// The warp's total of its lanes' partials, as recurrent_math::butterfly_sum adds them.
__device__ inline float recurrent_warp_sum(float v) {
  for (int off = recurrent_math::warp / 2; off > 0; off /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// conv1d: a block of 32 channels x 16 tokens steps through the row 16 tokens at a time; its
// tile holds the kernel - 1 inputs before the chunk, then the chunk's.
inline constexpr int recurrent_conv_channels = 32;
inline constexpr int recurrent_conv_tokens = 16;  // at least max_kernel - 1: they slide the window
inline constexpr int recurrent_conv_threads = recurrent_conv_channels * recurrent_conv_tokens;

__global__ void __launch_bounds__(recurrent_conv_threads)
    recurrent_conv1d(float* x, std::int64_t ld, std::int64_t n, std::int64_t channels,
                     float const* w, int kernel, float const* bias, bool silu, float* window,
                     bool reset) {
  constexpr int cw = recurrent_conv_channels, ct = recurrent_conv_tokens;
  __shared__ float tile[(recurrent_math::max_kernel - 1 + ct) * cw];
  int const tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  int const keep = kernel - 1;
  std::int64_t const c = static_cast<std::int64_t>(blockIdx.x) * cw + tx;
  bool const live = c < channels;
  if (ty < keep) tile[ty * cw + tx] = live && !reset ? window[ty * channels + c] : 0.0f;
  float const b = live && bias ? bias[c] : 0.0f;
  for (std::int64_t t0 = 0; t0 < n; t0 += ct) {
    std::int64_t const t = t0 + ty;
    bool const here = live && t < n;
    if (here) tile[(keep + ty) * cw + tx] = x[t * ld + c];
    __syncthreads();
    if (here)
      x[t * ld + c] =
          recurrent_math::conv1d_output(w + c * kernel, tile + ty * cw + tx, cw, kernel, b, silu);
    // The window slides to the last keep inputs: rows [count, count + keep) of the tile.
    int const count = n - t0 < ct ? static_cast<int>(n - t0) : ct;
    float const moved = ty < keep ? tile[(count + ty) * cw + tx] : 0.0f;
    __syncthreads();
    if (ty < keep) tile[ty * cw + tx] = moved;
  }
  if (live && ty < keep) window[ty * channels + c] = tile[ty * cw + tx];
}

// ssm_scan: a warp per state row (head, channel), 8 rows a block; lane l holds entries l + 32 m.
inline constexpr int recurrent_scan_warps = 8;
inline constexpr int recurrent_scan_threads = recurrent_scan_warps * recurrent_math::warp;

template <int M>
struct recurrent_ssm_inputs {
  float dt = 0.0f, x = 0.0f;
  float b[M] = {}, c[M] = {};
};

template <int M>
__global__ void __launch_bounds__(recurrent_scan_threads)
    recurrent_ssm_scan(ssm_shape p, float const* xbc, std::int64_t xbc_ld, float const* dt,
                       std::int64_t dt_ld, float const* dt_bias, float const* a, float const* d,
                       std::int64_t n, float* state, bool reset, float* y, std::int64_t y_ld) {
  int const lane = static_cast<int>(threadIdx.x) % recurrent_math::warp;
  std::int64_t const hd = p.head_dim, ds = p.state_size;
  std::int64_t const d_inner = static_cast<std::int64_t>(p.heads) * hd;
  std::int64_t const row = static_cast<std::int64_t>(blockIdx.x) * recurrent_scan_warps +
                           threadIdx.x / recurrent_math::warp;
  if (row >= d_inner) return;  // a whole warp: no shuffle is left short
  std::int64_t const h = row / hd, g = h / (p.heads / p.groups);
  float* sr = state + row * ds;
  float s[M];
  for (int m = 0; m < M; ++m) {
    std::int64_t const k = lane + recurrent_math::warp * m;
    s[m] = k < ds && !reset ? sr[k] : 0.0f;
  }
  auto const load = [&](std::int64_t t) {
    recurrent_ssm_inputs<M> in;
    float const* xt = xbc + t * xbc_ld;
    float const* bt = xt + d_inner + g * ds;
    float const* ct = bt + static_cast<std::int64_t>(p.groups) * ds;
    in.dt = dt[t * dt_ld + h];
    in.x = xt[row];
    for (int m = 0; m < M; ++m) {
      std::int64_t const k = lane + recurrent_math::warp * m;
      in.b[m] = k < ds ? bt[k] : 0.0f;
      in.c[m] = k < ds ? ct[k] : 0.0f;
    }
    return in;
  };
  float const bias = dt_bias[h], ah = a[h], dh = d[h];
  recurrent_ssm_inputs<M> cur;
  if (n > 0) cur = load(0);
  for (std::int64_t t = 0; t < n; ++t) {
    recurrent_ssm_inputs<M> const next = t + 1 < n ? load(t + 1) : cur;
    auto const gates = recurrent_math::ssm_token_gates(cur.dt, bias, ah, p.dt_min, p.dt_max);
    float const part = recurrent_math::ssm_lane_step(s, cur.b, cur.c, gates.decay,
                                                     recurrent_math::mul_rn(gates.step, cur.x));
    float const sum = recurrent_warp_sum(part);
    if (lane == 0) y[t * y_ld + row] = recurrent_math::ssm_output(sum, dh, cur.x);
    cur = next;
  }
  for (int m = 0; m < M; ++m)
    if (std::int64_t const k = lane + recurrent_math::warp * m; k < ds) sr[k] = s[m];
}

// gated_delta: a warp per value column, 8 columns of one head a block; lane l holds key rows
// l + 32 m. The block's [k_dim, 8] slice of the state passes through shared memory on the way in
// and out, so global memory is read and written in whole rows of 8 columns.
inline constexpr int recurrent_delta_columns = 8;
inline constexpr int recurrent_delta_pitch = recurrent_delta_columns + 1;  // no bank conflicts
inline constexpr int recurrent_delta_threads = recurrent_delta_columns * recurrent_math::warp;

template <int M>
struct recurrent_delta_inputs {
  float b = 0.0f, a = 0.0f, v = 0.0f;
  float q[M] = {}, k[M] = {};
};

template <int M>
__global__ void __launch_bounds__(recurrent_delta_threads)
    recurrent_gated_delta(delta_shape p, float const* qkv, std::int64_t qkv_ld, float const* b,
                          float const* a, std::int64_t ba_ld, float const* dt_bias,
                          float const* a_coef, std::int64_t n, float* state, bool reset, float* out,
                          std::int64_t out_ld) {
  constexpr int cols = recurrent_delta_columns, pitch = recurrent_delta_pitch;
  __shared__ float tile[recurrent_math::warp * M * pitch];
  int const lane = static_cast<int>(threadIdx.x) % recurrent_math::warp;
  int const col = static_cast<int>(threadIdx.x) / recurrent_math::warp;
  int const j = static_cast<int>(blockIdx.y);
  std::int64_t const dk = p.k_dim, dv = p.v_dim;
  std::int64_t const v0 = static_cast<std::int64_t>(blockIdx.x) * cols, v = v0 + col;
  float* sj = state + j * dk * dv;
  for (std::int64_t e = threadIdx.x; e < dk * cols; e += blockDim.x) {
    std::int64_t const i = e / cols, c = e % cols;
    if (v0 + c < dv) tile[i * pitch + c] = reset ? 0.0f : sj[i * dv + v0 + c];
  }
  __syncthreads();
  if (v < dv) {  // a whole warp: no shuffle is left short
    float s[M];
    for (int m = 0; m < M; ++m) {
      std::int64_t const i = lane + recurrent_math::warp * m;
      s[m] = i < dk ? tile[i * pitch + col] : 0.0f;
    }
    std::int64_t const k_all = static_cast<std::int64_t>(p.k_heads) * dk;
    std::int64_t const kh = recurrent_math::delta_key_head(j, p.k_heads, p.v_heads, p.tiled);
    auto const load = [&](std::int64_t t) {
      recurrent_delta_inputs<M> in;
      float const* qt = qkv + t * qkv_ld + kh * dk;
      float const* kt = qt + k_all;
      in.b = b[t * ba_ld + j];
      in.a = a[t * ba_ld + j];
      in.v = qkv[t * qkv_ld + 2 * k_all + j * dv + v];
      for (int m = 0; m < M; ++m) {
        std::int64_t const i = lane + recurrent_math::warp * m;
        in.q[m] = i < dk ? qt[i] : 0.0f;
        in.k[m] = i < dk ? kt[i] : 0.0f;
      }
      return in;
    };
    float const bias = dt_bias[j], coef = a_coef[j];
    recurrent_delta_inputs<M> cur;
    if (n > 0) cur = load(0);
    for (std::int64_t t = 0; t < n; ++t) {
      recurrent_delta_inputs<M> const next = t + 1 < n ? load(t + 1) : cur;
      float sq = 0.0f, sk = 0.0f;
      recurrent_math::delta_lane_squares(cur.q, cur.k, sq, sk);
      auto const norms = recurrent_math::delta_token_norms(
          recurrent_warp_sum(sq), recurrent_warp_sum(sk), p.k_dim, p.norm_eps);
      auto const gates = recurrent_math::delta_token_gates(cur.b, cur.a, bias, coef);
      recurrent_math::delta_lane_normalise(cur.q, cur.k, norms);
      float const kv = recurrent_warp_sum(recurrent_math::delta_lane_decay(s, cur.k, gates.decay));
      float const delta = recurrent_math::delta_correction(gates.beta, cur.v, kv);
      float const o = recurrent_warp_sum(recurrent_math::delta_lane_update(s, cur.k, cur.q, delta));
      if (lane == 0) out[t * out_ld + j * dv + v] = o;
      cur = next;
    }
    for (int m = 0; m < M; ++m)
      if (std::int64_t const i = lane + recurrent_math::warp * m; i < dk)
        tile[i * pitch + col] = s[m];
  }
  __syncthreads();
  for (std::int64_t e = threadIdx.x; e < dk * cols; e += blockDim.x) {
    std::int64_t const i = e / cols, c = e % cols;
    if (v0 + c < dv) sj[i * dv + v0 + c] = tile[i * pitch + c];
  }
}

}  // namespace detail

void conv1d(float* x, std::int64_t ld, std::int64_t n, std::int64_t channels, float const* w,
            int kernel, float const* bias, bool silu, float* window, bool reset, stream_t s) {
  detail::recurrent_require(n >= 0 && channels >= 0 && ld >= channels && kernel >= 1 &&
                                kernel <= recurrent_math::max_kernel,
                            "conv1d wants a kernel of 1..16 taps over rows of at least channels");
  if (channels == 0) return;
  constexpr int cw = detail::recurrent_conv_channels;
  dim3 const grid(static_cast<unsigned>((channels + cw - 1) / cw));
  dim3 const block(cw, detail::recurrent_conv_tokens);
  detail::recurrent_conv1d<<<grid, block, 0, s>>>(x, ld, n, channels, w, kernel, bias, silu, window,
                                                  reset);
  detail::recurrent_launched("conv1d");
}

void ssm_scan(ssm_shape const& p, float const* xbc, std::int64_t xbc_ld, float const* dt,
              std::int64_t dt_ld, float const* dt_bias, float const* a, float const* d,
              std::int64_t n, float* state, bool reset, float* y, std::int64_t y_ld, stream_t s) {
  detail::recurrent_require(
      n >= 0 && p.heads > 0 && p.head_dim > 0 && p.groups > 0 && p.heads % p.groups == 0,
      "ssm_scan wants heads, a head size and groups that divide the heads");
  std::int64_t const rows = static_cast<std::int64_t>(p.heads) * p.head_dim;
  constexpr int warps = detail::recurrent_scan_warps;
  dim3 const grid(static_cast<unsigned>((rows + warps - 1) / warps));
  bool const sized = recurrent_math::with_lane_entries(p.state_size, [&](auto entries) {
    detail::recurrent_ssm_scan<decltype(entries)::value>
        <<<grid, detail::recurrent_scan_threads, 0, s>>>(p, xbc, xbc_ld, dt, dt_ld, dt_bias, a, d,
                                                         n, state, reset, y, y_ld);
  });
  detail::recurrent_require(sized, "ssm_scan wants a state size of 1..256");
  detail::recurrent_launched("ssm_scan");
}

void gated_delta(delta_shape const& p, float const* qkv, std::int64_t qkv_ld, float const* b,
                 float const* a, std::int64_t ba_ld, float const* dt_bias, float const* a_coef,
                 std::int64_t n, float* state, bool reset, float* out, std::int64_t out_ld,
                 stream_t s) {
  detail::recurrent_require(n >= 0 && p.k_heads > 0 && p.v_heads > 0 &&
                                p.v_heads % p.k_heads == 0 && p.v_dim >= 1 && p.v_dim <= 256 &&
                                p.v_heads <= 65535,
                            "gated_delta wants k-heads that divide the v-heads and v_dim 1..256");
  constexpr int cols = detail::recurrent_delta_columns;
  dim3 const grid(static_cast<unsigned>((p.v_dim + cols - 1) / cols),
                  static_cast<unsigned>(p.v_heads));
  bool const sized = recurrent_math::with_lane_entries(p.k_dim, [&](auto entries) {
    detail::recurrent_gated_delta<decltype(entries)::value>
        <<<grid, detail::recurrent_delta_threads, 0, s>>>(p, qkv, qkv_ld, b, a, ba_ld, dt_bias,
                                                          a_coef, n, state, reset, out, out_ld);
  });
  detail::recurrent_require(sized, "gated_delta wants a k_dim of 1..256");
  detail::recurrent_launched("gated_delta");
}

}  // namespace tf::kernels::cuda
