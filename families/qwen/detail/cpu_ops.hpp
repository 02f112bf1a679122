#pragma once
/// The shared CPU ops under the Qwen forwards' detail namespace.
#include <families/common/cpu_ops.hpp>

namespace tf::families::qwen::detail {

using namespace tf::families::cpu_ops;

/// SiLU (x * sigmoid(x)), the gate of the SwiGLU MLP.
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

}  // namespace tf::families::qwen::detail
