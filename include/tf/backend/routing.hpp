#pragma once
/// MoE routing on the host, for every backend (the CPU backend routes here; CUDA brings the router
/// logits back and routes here too, so both pick the same experts): softmax top-k, or sigmoid with
/// a correction bias over the best groups, and Gemma 4's per-expert factors.
#include <tf/backend/backend.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tf::backend {

/// The k highest of n scores, highest first; equal scores go to the lower index, so the pick
/// never depends on anything but the scores.
inline void top_k(float const* scores, char const* allowed, int n, int k, std::int32_t* out) {
  for (int s = 0; s < k; ++s) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      bool taken = allowed && !allowed[e];
      for (int p = 0; p < s; ++p) taken = taken || out[p] == e;
      if (!taken && (best < 0 || scores[e] > scores[best])) best = e;
    }
    if (best < 0) throw error("tf: MoE routing found no expert for pick {} of {}", s, k);
    out[s] = best;
  }
}

/// weight[k] *= r.expert_scale[pick[k]] when the routing has per-expert factors (Gemma 4).
inline void scale_by_expert(routing_params const& r, std::int32_t const* pick, float* weight) {
  if (r.expert_scale.empty()) return;
  if (static_cast<int>(r.expert_scale.size()) != r.experts)
    throw error("tf: {} per-expert scales for {} experts", r.expert_scale.size(), r.experts);
  for (int k = 0; k < r.k; ++k) weight[k] *= r.expert_scale[static_cast<std::size_t>(pick[k])];
}

/// Picks r.k experts for one token from its router logits [r.experts] into pick/weight [r.k].
inline void route(routing_params const& r, float const* logits, float const* bias,
                  std::int32_t* pick, float* weight) {
  int const E = r.experts, K = r.k;
  if (K <= 0 || K > E) throw error("tf: top-{} of {} experts", K, E);
  thread_local std::vector<float> s, c;
  thread_local std::vector<char> keep;
  s.resize(static_cast<std::size_t>(E));
  if (r.kind == routing_kind::softmax_top_k) {
    float const mx = *std::max_element(logits, logits + E);
    double z = 0.0;
    for (int e = 0; e < E; ++e) z += std::exp(static_cast<double>(logits[e] - mx));
    for (int e = 0; e < E; ++e)
      s[static_cast<std::size_t>(e)] =
          static_cast<float>(std::exp(static_cast<double>(logits[e] - mx)) / z);
    top_k(s.data(), nullptr, E, K, pick);
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += weight[k] = s[static_cast<std::size_t>(pick[k])];
    for (int k = 0; k < K; ++k)
      weight[k] = (r.normalize ? weight[k] / sum : weight[k]) * (r.scale == 1.0f ? 1.0f : r.scale);
    scale_by_expert(r, pick, weight);
    return;
  }
  // sigmoid_groups: choose by score + bias within the best groups (a group's score is the sum of
  // its two best), weigh by the unbiased score.
  c.resize(s.size());
  keep.assign(static_cast<std::size_t>(E), 1);
  for (int e = 0; e < E; ++e) {
    s[static_cast<std::size_t>(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    c[static_cast<std::size_t>(e)] = s[static_cast<std::size_t>(e)] + (bias ? bias[e] : 0.0f);
  }
  int const G = r.groups, per = E / std::max(1, G);
  if (G > 1) {
    std::vector<float> gs(static_cast<std::size_t>(G));
    for (int g = 0; g < G; ++g) {
      float b1 = -std::numeric_limits<float>::infinity(), b2 = b1;
      for (int e = g * per; e < (g + 1) * per; ++e) {
        float const v = c[static_cast<std::size_t>(e)];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
      gs[static_cast<std::size_t>(g)] = per > 1 ? b1 + b2 : b1;
    }
    std::vector<std::int32_t> best(static_cast<std::size_t>(r.top_groups));
    top_k(gs.data(), nullptr, G, r.top_groups, best.data());
    std::fill(keep.begin(), keep.end(), 0);
    for (auto g : best)
      std::fill_n(keep.begin() + static_cast<std::ptrdiff_t>(g) * per, per, char{1});
  }
  top_k(c.data(), keep.data(), E, K, pick);
  double sum = 0.0;
  for (int k = 0; k < K; ++k) sum += weight[k] = s[static_cast<std::size_t>(pick[k])];
  for (int k = 0; k < K; ++k)
    weight[k] =
        r.normalize ? static_cast<float>(weight[k] / (sum + 1e-20)) * r.scale : weight[k] * r.scale;
  scale_by_expert(r, pick, weight);
}

}  // namespace tf::backend
