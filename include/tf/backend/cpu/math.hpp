#pragma once
/// The CPU backend's scalar steps, rounded as llama.cpp's CPU path rounds them: RMSNorm, RoPE
/// rotation (the angles: rope_angles.hpp), gelu (tanh) and silu.
#include <kernels/cpu/vec_math.hpp>
#include <tf/backend/rope_angles.hpp>

#include <cmath>
#include <cstdint>

namespace tf::backend::cpu_parts {

/// out = x * rsqrt(mean(x^2) + eps) * w over n elements (w already holds any +1 shift). The mean
/// is rounded to f32 and the scale taken in f32.
inline void rmsnorm(float const* x, float const* w, float* out, std::int64_t n, float eps) {
  double const ss = kernels::cpu::vec_math::sum_squares(x, n);
  float const mean = static_cast<float>(ss / static_cast<double>(n));
  float const inv = 1.0f / std::sqrt(mean + eps);
  for (std::int64_t i = 0; i < n; ++i) out[i] = (x[i] * inv) * w[i];
}

/// Interleaved (GPT-J) rotation of pairs (2i, 2i + 1) for i < half.
inline void rope_interleaved_apply(float* x, std::int64_t half, float const* c, float const* s) {
  for (std::int64_t i = 0; i < half; ++i) {
    float const x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c[i] - x1 * s[i];
    x[2 * i + 1] = x1 * c[i] + x0 * s[i];
  }
}

/// gelu with the tanh approximation (PyTorch's "gelu_pytorch_tanh"), its f32 steps as llama.cpp's
/// compiled CPU code rounds them (1 + 0.044715 x^2 in one fma).
inline float gelu_tanh(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * x * std::fma(0.044715f * x, x, 1.0f)));
}

/// silu(x) = x * sigmoid(x).
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

}  // namespace tf::backend::cpu_parts
