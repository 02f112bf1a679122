#pragma once
/// rank_order_sum: the one float sum of the host communicators' all-reduce. Every rank gathers
/// all ranks' blocks, then adds them in rank order, so every rank forms the same bits and an
/// element's order depends on the rank ids only, never on the message size.
#include <tf/error.hpp>

#include <cstddef>
#include <span>

namespace tf::dist {

/// out[i] = ((gathered[0][i] + gathered[1][i]) + gathered[2][i]) + ...; gathered is
/// [ranks, out.size()], rank-major.
inline void rank_order_sum(std::span<float const> gathered, int ranks, std::span<float> out) {
  std::size_t const n = out.size();
  if (ranks < 1 || gathered.size() != static_cast<std::size_t>(ranks) * n)
    throw tf::error("tf: rank_order_sum: {} gathered floats for {} ranks of {} (want ranks * n)",
                    gathered.size(), ranks, n);
  float const* g = gathered.data();
  float* o = out.data();
  for (std::size_t i = 0; i < n; ++i) o[i] = g[i];
  // Over i inside each rank: a compiler may vectorise across elements, never reorder one's sum.
  for (int r = 1; r < ranks; ++r) {
    float const* b = g + static_cast<std::size_t>(r) * n;
    for (std::size_t i = 0; i < n; ++i) o[i] = o[i] + b[i];
  }
}

}  // namespace tf::dist
