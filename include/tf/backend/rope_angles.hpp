#pragma once
/// RoPE's angles on the host, as llama.cpp's CPU path rounds them: every backend rotates by these
/// (the CPU backend directly, CUDA from a table the host fills), so both rotate alike.
#include <cmath>
#include <cstdint>

namespace tf::backend {

/// cos (c [dim/2]) and sin (s [dim/2]) of NeoX RoPE's angles freq_scale * pos * theta^(-2i / dim),
/// in f32 with each frequency the previous one times theta^(-2 / dim) (llama.cpp's bits).
inline void rope_neox_angles(double pos, double theta, std::int64_t dim, float* c, float* s,
                             float freq_scale = 1.0f) {
  std::int64_t const half = dim / 2;
  float const step = std::pow(static_cast<float>(theta), -2.0f / static_cast<float>(dim));
  float a = static_cast<float>(pos);
  for (std::int64_t i = 0; i < half; ++i) {
    float const t = freq_scale * a;
    c[i] = std::cos(t);
    s[i] = std::sin(t);
    a *= step;
  }
}

/// cos and sin of interleaved RoPE's angles pos * theta^(-2i / dim), each taken in double.
inline void rope_interleaved_angles(double pos, double theta, std::int64_t dim, float* c,
                                    float* s) {
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    double const a =
        pos * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
    c[i] = static_cast<float>(std::cos(a));
    s[i] = static_cast<float>(std::sin(a));
  }
}

}  // namespace tf::backend
