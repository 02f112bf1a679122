#pragma once
/// The CUDA norm kernels' arithmetic, callable from host and device, and host emulations of the
/// kernels in their exact order. A group of n is normalized by one block of threads_for(n)
/// threads: thread i adds the squares of x[i], x[i + threads], ... (each rounded to f32, as the
/// CPU backend rounds them) in double, and the partials are folded in a fixed tree. The CPU sums
/// the same f32 squares in double too, so the two sums agree while they stay exact in double, and
/// then so do the outputs, bit for bit.
#include <kernels/portable/elementwise_math.hpp>
#include <kernels/portable/hd.hpp>

#include <cmath>
#include <cstdint>

namespace tf::kernels::cuda::norm_math {

/// The most threads one norm block runs.
inline constexpr int max_threads = 256;

/// Threads of the block that normalizes a group of n: the smallest power of two >= n in 32..256.
TF_HD constexpr int threads_for(std::int64_t n) {
  int t = 32;
  while (t < max_threads && t < n) t *= 2;
  return t;
}

/// Thread i's share of a group's sum of squares: x[i]^2, x[i + threads]^2, ... each rounded to
/// f32, added in double in that order.
TF_HD inline double square_partial(float const* x, std::int64_t n, int i, int threads) {
  double acc = 0.0;
  for (std::int64_t j = i; j < n; j += threads) acc += static_cast<double>(x[j] * x[j]);
  return acc;
}

/// The block's total of its partials p [threads], folded in place as the kernel folds them:
/// p[i] += p[i + s] for s = threads / 2, ..., 1.
TF_HD inline double fold(double* p, int threads) {
  for (int s = threads / 2; s > 0; s /= 2)
    for (int i = 0; i < s; ++i) p[i] += p[i + s];
  return p[0];
}

/// 1 / sqrt(mean + eps) from a group's sum of squares, the mean rounded to f32 (as the CPU).
TF_HD inline float inv_rms(double sum, std::int64_t n, float eps) {
  float const mean = static_cast<float>(sum / static_cast<double>(n));
  return 1.0f / std::sqrt(mean + eps);
}

/// One output of an RMSNorm: (x * inv) * w.
TF_HD inline float normed(float x, float inv, float w) {
  return (x * inv) * w;
}

/// The kernel's inv_rms of x [n], on the host.
inline float inv_rms_of(float const* x, std::int64_t n, float eps) {
  double p[max_threads];
  int const threads = threads_for(n);
  for (int i = 0; i < threads; ++i) p[i] = square_partial(x, n, i, threads);
  return inv_rms(fold(p, threads), n, eps);
}

/// The rmsnorm kernel on the host: each group of `group` columns of each row normalized, with w
/// of `group` weights (shared) or `cols`.
inline void rmsnorm_rows(float const* x, float const* w, std::int64_t w_size, float* out,
                         std::int64_t rows, std::int64_t cols, std::int64_t group, float eps) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t g0 = 0; g0 < cols; g0 += group) {
      float const* xg = x + r * cols + g0;
      float const* wg = w + (w_size == group ? 0 : g0);
      float const inv = inv_rms_of(xg, group, eps);
      for (std::int64_t i = 0; i < group; ++i) out[r * cols + g0 + i] = normed(xg[i], inv, wg[i]);
    }
}

/// The residual kernel on the host, for one row of `cols`: o = rmsnorm(o) * post when post;
/// x += o; then o = rmsnorm(x) * next when next.
inline void residual_row(float* x, float* o, float const* post, float const* next,
                         std::int64_t cols, float eps) {
  if (post) {
    float const inv = inv_rms_of(o, cols, eps);
    for (std::int64_t i = 0; i < cols; ++i) o[i] = normed(o[i], inv, post[i]);
  }
  for (std::int64_t i = 0; i < cols; ++i) x[i] += o[i];
  if (next) {
    float const inv = inv_rms_of(x, cols, eps);
    for (std::int64_t i = 0; i < cols; ++i) o[i] = normed(x[i], inv, next[i]);
  }
}

/// The gated_rmsnorm kernel on the host, for one row of `cols` in groups of `group`:
/// norm_before_gate: y = rmsnorm(y) * w * silu(z); else y = rmsnorm(y * silu(z)) * w.
inline void gated_rmsnorm_row(float* y, float const* z, float const* w, std::int64_t w_size,
                              std::int64_t cols, std::int64_t group, float eps,
                              bool norm_before_gate) {
  for (std::int64_t g0 = 0; g0 < cols; g0 += group) {
    float* yg = y + g0;
    float const* zg = z + g0;
    float const* wg = w + (w_size == group ? 0 : g0);
    if (!norm_before_gate)
      for (std::int64_t i = 0; i < group; ++i) yg[i] *= portable::elementwise_math::silu(zg[i]);
    float const inv = inv_rms_of(yg, group, eps);
    for (std::int64_t i = 0; i < group; ++i) {
      yg[i] = normed(yg[i], inv, wg[i]);
      if (norm_before_gate) yg[i] *= portable::elementwise_math::silu(zg[i]);
    }
  }
}

}  // namespace tf::kernels::cuda::norm_math
