#pragma once
/// Mixture-of-experts pieces shared by the MoE families on the CPU: a view of the expert weights
/// (sliced from 3-D stacked tensors or bound per expert), a top-k pick with a fixed tie order, and
/// run_experts, which runs each chosen expert once over all the rows that picked it (SwiGLU) and
/// adds weight * expert(x) to each row in k-slot order. Routing itself (softmax or sigmoid + bias,
/// renormalisation, scaling) stays in each family; results do not depend on the batch's make-up.
#include <families/common/cpu_ops.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tf::families::moe {

using cpu_ops::matrix;
using cpu_ops::thread_pool;

/// One expert's SwiGLU MLP: gate and up are [n_ff, hidden], down is [hidden, n_ff].
struct expert_weights {
  matrix gate, up, down;
};

/// One routing choice for a row: which expert, and the weight its output is scaled by.
struct expert_pick {
  std::int32_t expert = 0;
  float weight = 0.0f;
};

/// The `n_expert` matrices of `rows` x `cols` stacked in a 3-D tensor with dims
/// {cols, rows, n_expert} (GGUF's ffn_*_exps; anything with name, type, dims, data, bytes).
/// Throws tf::error naming the tensor when its shape or size disagrees.
template <class View>
std::vector<matrix> stacked_experts(View const& t, std::int64_t rows, std::int64_t cols,
                                    std::int64_t n_expert) {
  if (t.dims.size() != 3 || t.dims[0] != cols || t.dims[1] != rows || t.dims[2] != n_expert)
    throw error("tf: expert tensor {} has dims [{}], expected [{}, {}, {}]", t.name,
                fmt::join(t.dims, ", "), cols, rows, n_expert);
  auto const row_bytes = model::row_bytes(t.type, static_cast<std::uint64_t>(cols));
  auto const expert_bytes = row_bytes * static_cast<std::uint64_t>(rows);
  if (expert_bytes * static_cast<std::uint64_t>(n_expert) > t.bytes)
    throw error("tf: expert tensor {} holds {} bytes, {} experts of {} need {}", t.name, t.bytes,
                n_expert, expert_bytes, expert_bytes * static_cast<std::uint64_t>(n_expert));
  std::vector<matrix> out;
  out.reserve(static_cast<std::size_t>(n_expert));
  for (std::int64_t e = 0; e < n_expert; ++e)
    out.push_back(matrix{t.type, rows, cols, t.data + static_cast<std::uint64_t>(e) * expert_bytes,
                         row_bytes});
  return out;
}

/// The k highest of n scores into `out` (weight = the score), highest first; equal scores go to
/// the lower expert index, so the pick never depends on anything but the scores.
inline void top_k(float const* scores, int n, int k, expert_pick* out) {
  if (k <= 0 || k > n) throw error("tf: top-{} of {} experts", k, n);
  for (int s = 0; s < k; ++s) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      bool taken = false;
      for (int p = 0; p < s; ++p) taken = taken || out[p].expert == e;
      if (taken) continue;
      if (best < 0 || scores[e] > scores[best]) best = e;
    }
    out[s] = expert_pick{best, scores[best]};
  }
}

/// out[r] += sum over slots s < k (in slot order) of picks[r*k+s].weight * expert(x[r]), where
/// expert is SwiGLU: down(silu(gate x) * up x). x and out are [n_rows, hidden]. Each chosen expert
/// runs once over the rows that chose it; unchosen experts' weights are never read.
inline void run_experts(thread_pool& pool, std::span<expert_weights const> experts, float const* x,
                        std::int64_t n_rows, expert_pick const* picks, int k, float* out) {
  if (experts.empty() || n_rows <= 0) return;
  std::int64_t const hidden = experts[0].gate.cols, n_ff = experts[0].gate.rows;
  auto const n_slots = static_cast<std::size_t>(n_rows) * static_cast<std::size_t>(k);
  for (std::size_t i = 0; i < n_slots; ++i)
    if (picks[i].expert < 0 || static_cast<std::size_t>(picks[i].expert) >= experts.size())
      throw error("tf: MoE pick {} names expert {} of {}", i, picks[i].expert, experts.size());
  std::vector<float> results(n_slots * static_cast<std::size_t>(hidden));  // per (row, slot)
  std::vector<std::size_t> slots;
  std::vector<float> xb, g, u, y;
  for (std::size_t e = 0; e < experts.size(); ++e) {
    slots.clear();
    for (std::size_t i = 0; i < n_slots; ++i)
      if (static_cast<std::size_t>(picks[i].expert) == e) slots.push_back(i);
    if (slots.empty()) continue;
    auto const m = static_cast<std::int64_t>(slots.size());
    auto const h = static_cast<std::size_t>(hidden), f = static_cast<std::size_t>(n_ff);
    xb.resize(slots.size() * h);
    for (std::size_t j = 0; j < slots.size(); ++j) {
      float const* src = x + (slots[j] / static_cast<std::size_t>(k)) * h;
      std::copy(src, src + h, xb.data() + j * h);
    }
    g.resize(slots.size() * f);
    u.resize(slots.size() * f);
    y.resize(slots.size() * h);
    cpu_ops::matmul(pool, experts[e].gate, xb.data(), g.data(), m);
    cpu_ops::matmul(pool, experts[e].up, xb.data(), u.data(), m);
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    cpu_ops::matmul(pool, experts[e].down, g.data(), y.data(), m);
    for (std::size_t j = 0; j < slots.size(); ++j)
      std::copy(y.data() + j * h, y.data() + (j + 1) * h, results.data() + slots[j] * h);
  }
  for (std::int64_t r = 0; r < n_rows; ++r)
    for (int s = 0; s < k; ++s) {
      auto const i =
          static_cast<std::size_t>(r) * static_cast<std::size_t>(k) + static_cast<std::size_t>(s);
      float const w = picks[i].weight;
      float const* src = results.data() + i * static_cast<std::size_t>(hidden);
      float* dst = out + static_cast<std::size_t>(r) * static_cast<std::size_t>(hidden);
      for (std::int64_t c = 0; c < hidden; ++c) dst[c] += w * src[c];
    }
}

}  // namespace tf::families::moe
