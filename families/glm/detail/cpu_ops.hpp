#pragma once
/// The shared CPU ops under the GLM forwards' detail namespace, plus partial RoPE.
#include <families/common/cpu_ops.hpp>

#include <cmath>
#include <cstdint>

namespace tf::families::glm::detail {

using namespace tf::families::cpu_ops;

/// Interleaved (GPT-J) RoPE in place on the first `rot` floats of a head: pairs (2i, 2i + 1),
/// frequency theta^(-2i / rot); the rest of the head passes through.
inline void rope_interleaved(float* x, std::int64_t rot, double pos, double theta) {
  for (std::int64_t i = 0; i < rot / 2; ++i) {
    double const inv_freq =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
    double const a = pos * inv_freq;
    float const c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
    float const x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * c - x1 * s;
    x[2 * i + 1] = x1 * c + x0 * s;
  }
}

/// NeoX RoPE in place on the first `rot` floats of a head: pairs (i, i + rot/2).
inline void rope_neox_partial(float* x, std::int64_t rot, double pos, double theta) {
  rope_neox(x, rot, pos, theta);
}

/// silu(x) = x * sigmoid(x).
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

}  // namespace tf::families::glm::detail
