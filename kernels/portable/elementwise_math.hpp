#pragma once
/// The CUDA kernels' per-element arithmetic, callable from host and device: activations, sigmoid,
/// softcap, the RoPE rotation of a pair and the weighted sums of the MoE combine. Products and sums
/// that the CPU backend rounds on their own are written with mul_rn and add_rn, so nvcc does not
/// fuse them into an fma and a kernel's bits match the host's for the same exp and tanh.
#include <kernels/portable/hd.hpp>

#include <cmath>
#include <cstdint>

namespace tf::kernels::portable::elementwise_math {

/// a * b rounded to f32 on its own (never fused with a following add).
TF_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// a + b rounded on its own (never fused with a preceding product, such as exp's last).
TF_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

TF_HD inline float sigmoid(float x) {
  return 1.0f / add_rn(1.0f, std::exp(-x));
}

/// silu(x) = x * sigmoid(x), as the CPU backend writes it.
TF_HD inline float silu(float x) {
  return x / add_rn(1.0f, std::exp(-x));
}

/// gelu with the tanh approximation, in the CPU backend's f32 steps (1 + 0.044715 x^2 in one fma).
TF_HD inline float gelu_tanh(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * x * std::fma(0.044715f * x, x, 1.0f)));
}

/// relu(x)^2.
TF_HD inline float relu2(float x) {
  float const r = x > 0.0f ? x : 0.0f;
  return r * r;
}

/// cap * tanh(x / cap).
TF_HD inline float softcap(float x, float cap) {
  return cap * std::tanh(x / cap);
}

/// NeoX rotation of the pair (x0, x1) = (x[i], x[i + dims/2]) by cos c and sin s, one fma each as
/// the CPU backend's rope_rotate.
TF_HD inline void rotate_neox(float& x0, float& x1, float c, float s) {
  float const a = x0, b = x1;
  x0 = std::fma(a, c, -(b * s));
  x1 = std::fma(a, s, b * c);
}

/// Interleaved rotation of the pair (x[2i], x[2i + 1]), each product rounded on its own.
TF_HD inline void rotate_interleaved(float& x0, float& x1, float c, float s) {
  float const a = x0, b = x1;
  x0 = mul_rn(a, c) - mul_rn(b, s);
  x1 = mul_rn(b, c) + mul_rn(a, s);
}

/// out + scale * y with the product rounded first (the MoE's gated shared expert added on).
TF_HD inline float add_scaled(float out, float y, float scale) {
  return out + mul_rn(y, scale);
}

/// sum over j < k, in order, of weight[j] * y[j * stride]: one output of the MoE combine.
TF_HD inline float weighted_picks(float const* weight, float const* y, std::int64_t stride, int k) {
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) acc = acc + mul_rn(weight[j], y[j * stride]);
  return acc;
}

}  // namespace tf::kernels::portable::elementwise_math
