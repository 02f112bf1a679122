#pragma once
/// The CUDA attention kernel's arithmetic, callable from host and device, and a host emulation of
/// one query in the kernel's exact order. A query walks its keys in tiles of tile_keys: each key's
/// score is a warp's dot (lane l takes d = l, l + 32, ... in one fma chain, then a butterfly over
/// the lanes), capped; the tile then updates an online softmax in f32 (running max, running sum,
/// the output rescaled and the tile's weighted values added in key order).
#include <kernels/portable/elementwise_math.hpp>
#include <kernels/portable/hd.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace tf::kernels::cuda::attention_math {

/// Lanes that share one key's dot product (a warp).
inline constexpr int lanes = 32;
/// Keys per online-softmax step.
inline constexpr int tile_keys = 32;
/// The largest head the kernel takes.
inline constexpr int max_head_dim = 512;

/// Lane `lane`'s share of q . k: an fma chain over d = lane, lane + lanes, ... in order. T is
/// float or half (which converts to float exactly).
template <class T>
TF_HD inline float lane_dot(float const* q, T const* k, int head_dim, int lane) {
  float acc = 0.0f;
  for (int d = lane; d < head_dim; d += lanes) acc = std::fma(q[d], static_cast<float>(k[d]), acc);
  return acc;
}

/// The lanes' partials p [lanes] folded as the warp's butterfly folds them: p[i] += p[i + o] for
/// o = lanes / 2, ..., 1 (a butterfly gives every lane these bits, as a + b == b + a).
TF_HD inline float fold_lanes(float* p) {
  for (int o = lanes / 2; o > 0; o /= 2)
    for (int i = 0; i < o; ++i) p[i] += p[i + o];
  return p[0];
}

/// A key's score from its dot product with the scaled query: capped when cap > 0.
TF_HD inline float score(float dot, float cap) {
  return cap > 0.0f ? portable::elementwise_math::softcap(dot, cap) : dot;
}

/// The running max after a tile of scores s [count].
TF_HD inline float tile_max(float const* s, int count, float running) {
  float m = running;
  for (int j = 0; j < count; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

/// A key's unnormalized weight under the running max.
TF_HD inline float weight(float s, float max) {
  return std::exp(s - max);
}

/// What the sums so far are multiplied by when the max moves from `old_max` (-inf before the
/// first tile: then 0) to `new_max`.
TF_HD inline float rescale(float old_max, float new_max) {
  return std::exp(old_max - new_max);
}

/// The running sum of weights after a tile of weights p [count], added in key order.
TF_HD inline float next_sum(float sum, float corr, float const* p, int count) {
  float tile = 0.0f;
  for (int j = 0; j < count; ++j) tile += p[j];
  return std::fma(sum, corr, tile);
}

/// One output dimension d after a tile: acc * corr, then p[j] * v_rows[j][d] added in key order.
template <class T>
TF_HD inline float accumulate(float acc, float corr, float const* p, T const* const* v_rows, int d,
                              int count) {
  acc *= corr;
  for (int j = 0; j < count; ++j) acc = std::fma(p[j], static_cast<float>(v_rows[j][d]), acc);
  return acc;
}

/// The kernel's attention of one query on the host: q [head_dim] already multiplied by the scale,
/// keys k_rows[j] and values v_rows[j] for j < keys in position order; out [head_dim] =
/// sum_j softmax(score_j) v_j.
inline void attend_query(float const* q, int head_dim, int keys, float const* const* k_rows,
                         float const* const* v_rows, float cap, float* out) {
  float acc[max_head_dim] = {};
  float max = -std::numeric_limits<float>::infinity(), sum = 0.0f;
  for (int j0 = 0; j0 < keys; j0 += tile_keys) {
    int const count = std::min(tile_keys, keys - j0);
    float s[tile_keys], p[tile_keys], part[lanes];
    for (int j = 0; j < count; ++j) {
      for (int l = 0; l < lanes; ++l) part[l] = lane_dot(q, k_rows[j0 + j], head_dim, l);
      s[j] = score(fold_lanes(part), cap);
    }
    float const new_max = tile_max(s, count, max);
    float const corr = rescale(max, new_max);
    for (int j = 0; j < count; ++j) p[j] = weight(s[j], new_max);
    sum = next_sum(sum, corr, p, count);
    for (int d = 0; d < head_dim; ++d) acc[d] = accumulate(acc[d], corr, p, v_rows + j0, d, count);
    max = new_max;
  }
  for (int d = 0; d < head_dim; ++d) out[d] = acc[d] / sum;
}

}  // namespace tf::kernels::cuda::attention_math
