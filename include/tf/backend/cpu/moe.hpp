#pragma once
/// The CPU backend's mixture of experts: routing (softmax top-k, or sigmoid with a correction bias
/// over the best groups) and the experts, each run once over the rows that picked it. A row's
/// result is summed in pick order, so it does not depend on what else is in the batch.
#include <kernels/cpu/thread_pool.hpp>
#include <tf/backend/backend.hpp>
#include <tf/backend/cpu/math.hpp>
#include <tf/backend/cpu/matrix.hpp>
#include <tf/backend/routing.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tf::backend::cpu_parts {

/// One expert's MLP: gate and up are [n_ff, hidden], down is [hidden, n_ff]; without a gate (gate
/// empty) it is down(act(up x)).
struct expert {
  matrix gate, up, down;
};

/// Working memory of one MoE call.
struct moe_scratch {
  std::vector<float> logits, weight, results, xb, g, u, y, gate, lx, lsum, sh;
  std::vector<std::int32_t> pick;
  std::vector<std::size_t> chosen;  // the (row, pick)s of one expert
};

/// out [n, hidden] = sum over picks k (in order) of w_k * expert_k(x) (+ shared(x), times
/// sigmoid(shared_gate x) when given), where each expert is down(act(gate x) * up x), or
/// down(act(up x)) without a gate, and x is [n, hidden]. With latent projections (Nemotron 3
/// Super) the experts read latent_down x and their sum goes through latent_up; the router and
/// the shared expert read x. Unchosen experts are never read.
template <class Glu, class Act>
void run_moe(kernels::cpu::thread_pool& pool, routing_params const& r, matrix const& router,
             float const* bias, std::span<expert const> experts, expert const* shared,
             matrix const* shared_gate, matrix const* latent_down, matrix const* latent_up,
             float const* x, std::int64_t n, float* out, Glu&& glu, Act&& act, moe_scratch& m) {
  if (static_cast<int>(experts.size()) != r.experts)
    throw error("tf: MoE layer has {} experts, its routing {}", experts.size(), r.experts);
  std::int64_t const hidden = router.cols, K = r.k;
  if ((latent_down == nullptr) != (latent_up == nullptr))
    throw error("tf: a latent MoE needs both projections");
  m.logits.resize(static_cast<std::size_t>(n * r.experts));
  m.pick.resize(static_cast<std::size_t>(n * K));
  m.weight.resize(m.pick.size());
  matmul(pool, router, x, m.logits.data(), n);
  for (std::int64_t t = 0; t < n; ++t)
    route(r, m.logits.data() + t * r.experts, bias, m.pick.data() + t * K, m.weight.data() + t * K);
  // The experts read x, or its latent projection (and write that width back).
  float const* ex = x;
  std::int64_t width = hidden;
  if (latent_down) {
    width = latent_down->rows;
    m.lx.resize(static_cast<std::size_t>(n * width));
    matmul(pool, *latent_down, x, m.lx.data(), n);
    ex = m.lx.data();
  }
  auto const w = static_cast<std::size_t>(width);
  auto run = [&](expert const& e, float const* xs, std::int64_t rows, float* ys) {
    auto const f = static_cast<std::size_t>(e.up.rows) * static_cast<std::size_t>(rows);
    if (e.gate.empty()) {
      m.u.resize(f);
      matmul(pool, e.up, xs, m.u.data(), rows);
      act(m.u.data(), static_cast<std::int64_t>(f));
      matmul(pool, e.down, m.u.data(), ys, rows);
      return;
    }
    m.g.resize(f);
    m.u.resize(f);
    std::pair<matrix const*, float*> const gu[] = {{&e.gate, m.g.data()}, {&e.up, m.u.data()}};
    matmul_group(pool, gu, xs, rows);
    glu(m.g.data(), m.u.data(), static_cast<std::int64_t>(f));
    matmul(pool, e.down, m.g.data(), ys, rows);
  };
  // Each expert once over the (row, pick)s that chose it; results kept per (row, pick).
  auto const n_picks = static_cast<std::size_t>(n * K);
  m.results.resize(n_picks * w);
  for (std::size_t e = 0; e < experts.size(); ++e) {
    m.chosen.clear();
    for (std::size_t i = 0; i < n_picks; ++i)
      if (static_cast<std::size_t>(m.pick[i]) == e) m.chosen.push_back(i);
    if (m.chosen.empty()) continue;
    if (experts[e].down.rows != width)
      throw error("tf: MoE expert {} writes {} values, the layer wants {}", e, experts[e].down.rows,
                  width);
    m.xb.resize(m.chosen.size() * w);
    for (std::size_t j = 0; j < m.chosen.size(); ++j)
      std::copy_n(ex + (m.chosen[j] / static_cast<std::size_t>(K)) * w, w, m.xb.data() + j * w);
    m.y.resize(m.xb.size());
    run(experts[e], m.xb.data(), static_cast<std::int64_t>(m.chosen.size()), m.y.data());
    for (std::size_t j = 0; j < m.chosen.size(); ++j)
      std::copy_n(m.y.data() + j * w, w, m.results.data() + m.chosen[j] * w);
  }
  // The routed sum per token, in pick order (in the latent width, then projected back).
  float* routed = out;
  if (latent_up) {
    m.lsum.resize(static_cast<std::size_t>(n * width));
    routed = m.lsum.data();
  }
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t i = 0; i < width; ++i) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < K; ++k)
        acc += m.weight[static_cast<std::size_t>(t * K + k)] *
               m.results[static_cast<std::size_t>((t * K + k) * width + i)];
      routed[t * width + i] = acc;
    }
  if (latent_up) matmul(pool, *latent_up, routed, out, n);
  if (!shared) return;
  m.sh.resize(static_cast<std::size_t>(n * hidden));
  run(*shared, x, n, m.sh.data());
  if (shared_gate) {
    m.gate.resize(static_cast<std::size_t>(n));
    matmul(pool, *shared_gate, x, m.gate.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float const g = 1.0f / (1.0f + std::exp(-m.gate[static_cast<std::size_t>(t)]));
      for (std::int64_t i = 0; i < hidden; ++i) m.sh[static_cast<std::size_t>(t * hidden + i)] *= g;
    }
  }
  for (std::int64_t i = 0; i < n * hidden; ++i) out[i] += m.sh[static_cast<std::size_t>(i)];
}

}  // namespace tf::backend::cpu_parts
