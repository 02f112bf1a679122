#pragma once
/// Elementwise and row kernels in f32: RMSNorm, RoPE (NeoX and interleaved), softmax,
/// gelu_tanh, silu, mul, add. Sums run in a fixed order, so results do not depend on threads.
#include <tf/error.hpp>

#include <cmath>
#include <cstdint>

namespace tf::kernels::cpu {

/// Inputs of rms_norm: y = x / sqrt(mean(x^2) + eps) * (w + weight_offset), per row.
struct rms_norm_params {
  const float* x = nullptr;  // [rows, n]
  const float* w = nullptr;  // [n]
  float* y = nullptr;        // [rows, n]; may be x (in place)
  std::int64_t rows = 1;
  std::int64_t n = 0;
  float eps = 1e-6f;
  float weight_offset = 0.0f;  // 1 for Gemma's (1 + w) norms
};

namespace detail {
// Sum of squares in 8 interleaved f32 partials, combined in a fixed tree.
inline float sum_squares(const float* x, std::int64_t n) {
  float p[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) p[j] += x[i + j] * x[i + j];
  for (int j = 0; i < n; ++i, ++j) p[j] += x[i] * x[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}
}  // namespace detail

/// RMSNorm of each row; throws tf::error for n <= 0 or missing pointers.
inline void rms_norm(const rms_norm_params& p) {
  if (p.n <= 0 || p.rows < 0 || !p.x || !p.w || !p.y)
    throw tf::error("tf::kernels::cpu::rms_norm: bad params (rows={}, n={})", p.rows, p.n);
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* x = p.x + r * p.n;
    float* y = p.y + r * p.n;
    const float mean = detail::sum_squares(x, p.n) / static_cast<float>(p.n);
    const float inv = 1.0f / std::sqrt(mean + p.eps);
    for (std::int64_t i = 0; i < p.n; ++i) y[i] = x[i] * inv * (p.w[i] + p.weight_offset);
  }
}

/// Which elements RoPE rotates together.
enum class rope_style {
  neox,         // pairs (i, i + n_rot/2): rotate_half (GPT-NeoX, Gemma, Qwen)
  interleaved,  // pairs (2i, 2i + 1): GPT-J / original LLaMA layout
};

/// Inputs of rope: rotates the first n_rot dims of every head of every row, in place.
struct rope_params {
  float* x = nullptr;                 // [rows, n_heads, head_dim]
  const std::int64_t* pos = nullptr;  // [rows] position of each row
  std::int64_t rows = 1;
  std::int64_t n_heads = 1;
  std::int64_t head_dim = 0;
  std::int64_t n_rot = 0;  // even, <= head_dim
  float theta_base = 10000.0f;
  float freq_scale = 1.0f;  // linear position scaling (positions multiplied by it)
  rope_style style = rope_style::neox;
};

/// RoPE: pair j gets angle pos * freq_scale * theta_base^(-2j / n_rot), computed in double.
inline void rope(const rope_params& p) {
  if (!p.x || !p.pos || p.head_dim <= 0 || p.n_rot <= 0 || p.n_rot > p.head_dim ||
      p.n_rot % 2 != 0 || p.rows < 0 || p.n_heads <= 0)
    throw tf::error("tf::kernels::cpu::rope: bad params (head_dim={}, n_rot={}, n_heads={})",
                    p.head_dim, p.n_rot, p.n_heads);
  const std::int64_t half = p.n_rot / 2;
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const double pos = static_cast<double>(p.pos[r]) * static_cast<double>(p.freq_scale);
    for (std::int64_t j = 0; j < half; ++j) {
      const double inv_freq =
          std::pow(static_cast<double>(p.theta_base),
                   -2.0 * static_cast<double>(j) / static_cast<double>(p.n_rot));
      const double angle = pos * inv_freq;
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      for (std::int64_t h = 0; h < p.n_heads; ++h) {
        float* v = p.x + (r * p.n_heads + h) * p.head_dim;
        const std::int64_t a = p.style == rope_style::neox ? j : 2 * j;
        const std::int64_t b = p.style == rope_style::neox ? j + half : 2 * j + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

/// Numerically stable softmax of x [n] into y [n] (may alias): max first, sums left to right.
inline void softmax(const float* x, float* y, std::int64_t n) {
  if (n <= 0) return;
  float m = x[0];
  for (std::int64_t i = 1; i < n; ++i) m = std::fmax(m, x[i]);
  float sum = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - m);
    sum += y[i];
  }
  const float inv = 1.0f / sum;
  for (std::int64_t i = 0; i < n; ++i) y[i] *= inv;
}

/// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline float gelu_tanh(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

/// SiLU: x / (1 + e^-x).
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

/// y [n] = gelu_tanh(x [n]); may alias.
inline void gelu_tanh(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(x[i]);
}

/// y [n] = silu(x [n]); may alias.
inline void silu(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = silu(x[i]);
}

/// y [n] = gelu_tanh(gate [n]) * up [n] (gated FFN); may alias either input.
inline void gelu_tanh_mul(const float* gate, const float* up, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = gelu_tanh(gate[i]) * up[i];
}

/// y [n] = silu(gate [n]) * up [n] (SwiGLU); may alias either input.
inline void silu_mul(const float* gate, const float* up, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = silu(gate[i]) * up[i];
}

/// y [n] = a [n] * b [n]; may alias.
inline void mul(const float* a, const float* b, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

/// y [n] = a [n] + b [n]; may alias.
inline void add(const float* a, const float* b, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

/// y [n] = x [n] * s; may alias.
inline void scale(const float* x, float s, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

}  // namespace tf::kernels::cpu
