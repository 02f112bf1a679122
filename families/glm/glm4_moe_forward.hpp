#pragma once
/// The GLM-4.5 MoE forward pass on the CPU: one batched entry point over several streams, each with
/// its own page table into per-layer paged KV storage. A row's logits do not depend on what else
/// is in the batch or on the thread count.
#include <families/common/forward_rows.hpp>
#include <families/common/paged_attention.hpp>
#include <families/glm/detail/cpu_ops.hpp>
#include <families/glm/glm4_moe_weights.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

namespace tf::families::glm {

using families::batch_row;
using families::kv_dtype;
using families::kv_shape;

/// GLM-4.5 MoE forward over f32 or f16 paged KV storage.
class glm4_moe_forward {
 public:
  glm4_moe_forward(glm4_moe_weights w, kv_shape kv, int threads = 1)
      : w_(std::move(w)), pool_(std::make_unique<detail::thread_pool>(threads)) {
    if (threads < 1 || threads > 1024)
      throw error("tf: glm4_moe forward wants 1..1024 threads, got {}", threads);
    auto const& hp = w_.hp;
    kv_ = paged_kv(kv, hp.num_layers, hp.num_kv_heads, hp.head_dim, "glm4_moe");
  }

  glm4_moe_hparams const& hparams() const { return w_.hp; }
  glm4_moe_weights const& weights() const { return w_; }
  kv_shape kv() const { return kv_.shape(); }
  std::int64_t vocab_size() const { return w_.hp.vocab_size; }
  int threads() const { return pool_->size(); }

  /// When on, forward() keeps each MoE layer's picks: routes()[m][t * experts_per_tok + k] is
  /// the k-th expert token t chose in the m-th MoE layer of the last call.
  void record_routes(bool on) { record_routes_ = on; }
  std::vector<std::vector<std::int32_t>> const& routes() const { return last_routes_; }

  /// How many logits rows forward() writes for `rows`.
  static std::int64_t logits_rows(std::span<batch_row const> rows) {
    return paged_kv::logits_rows(rows);
  }

  /// Runs every row; writes logits [logits_rows(rows), vocab] in row order.
  void forward(std::span<batch_row const> rows, float* logits) {
    auto const& hp = w_.hp;
    kv_.check(rows, hp.vocab_size);
    std::int64_t const n = kv_.gather(rows);
    std::int64_t const h = hp.hidden_size, hd = hp.head_dim;
    std::int64_t const q_dim = hd * hp.num_heads, kv_dim = hd * hp.num_kv_heads;
    x_.resize(static_cast<std::size_t>(n * h));
    xn_.resize(x_.size());
    q_.resize(static_cast<std::size_t>(n * q_dim));
    att_.resize(q_.size());
    kk_.resize(static_cast<std::size_t>(n * kv_dim));
    vv_.resize(kk_.size());
    last_routes_.clear();

    kv_.embed(*pool_, w_.embd, x_.data(), n, h);

    for (int l = 0; l < hp.num_layers; ++l) layer(l, n);

    // Final norm and head, only for the tokens that want logits.
    kv_.head(*pool_, w_.output_norm, w_.output, x_.data(), hn_, h, hp.rms_norm_eps, logits);
  }

 private:
  // y[t] += b for each of n rows of `width`; no-op without a bias.
  static void add_bias(float* y, std::vector<float> const& b, std::int64_t n, std::int64_t width) {
    if (b.empty()) return;
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t i = 0; i < width; ++i) y[t * width + i] += b[static_cast<std::size_t>(i)];
  }

  // Picks experts_per_tok experts for one token: sigmoid scores, choice = score + correction
  // bias within the top topk_group groups (a group's score is the sum of its two best), weights
  // the unbiased scores, renormalized if asked, times routed_scaling_factor. Ties go to the lower
  // expert index.
  void route(float const* logits, float const* bias, std::int32_t* pick, float* weight) const {
    auto const& hp = w_.hp;
    int const E = hp.num_experts, K = hp.experts_per_tok, G = hp.n_group, per = E / G;
    thread_local std::vector<float> s, c;
    thread_local std::vector<char> keep;
    s.resize(static_cast<std::size_t>(E));
    c.resize(s.size());
    keep.assign(static_cast<std::size_t>(E), 1);
    for (int e = 0; e < E; ++e) {
      s[static_cast<std::size_t>(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
      c[static_cast<std::size_t>(e)] = s[static_cast<std::size_t>(e)] + bias[e];
    }
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
      std::vector<char> gkeep(static_cast<std::size_t>(G), 0);
      for (int k = 0; k < hp.topk_group; ++k) {
        int best = -1;
        for (int g = 0; g < G; ++g)
          if (!gkeep[static_cast<std::size_t>(g)] &&
              (best < 0 || gs[static_cast<std::size_t>(g)] > gs[static_cast<std::size_t>(best)]))
            best = g;
        gkeep[static_cast<std::size_t>(best)] = 1;
      }
      for (int e = 0; e < E; ++e)
        keep[static_cast<std::size_t>(e)] = gkeep[static_cast<std::size_t>(e / per)];
    }
    double sum = 0.0;
    for (int k = 0; k < K; ++k) {
      int best = -1;
      for (int e = 0; e < E; ++e)
        if (keep[static_cast<std::size_t>(e)] &&
            (best < 0 || c[static_cast<std::size_t>(e)] > c[static_cast<std::size_t>(best)]))
          best = e;
      keep[static_cast<std::size_t>(best)] = 0;
      pick[k] = best;
      weight[k] = s[static_cast<std::size_t>(best)];
      sum += weight[k];
    }
    float const scale = hp.routed_scaling_factor;
    for (int k = 0; k < K; ++k)
      weight[k] = hp.norm_topk_prob ? static_cast<float>(weight[k] / (sum + 1e-20)) * scale
                                    : weight[k] * scale;
  }

  // SwiGLU for n rows of xn into out: out = down(silu(gate x) * up x).
  void swiglu(matrix const& gate, matrix const& up, matrix const& down, float const* xn, float* out,
              std::int64_t n) {
    std::int64_t const ff = gate.rows;
    g_.resize(static_cast<std::size_t>(n * ff));
    u_.resize(g_.size());
    detail::matmul_group(*pool_, {{gate, g_.data()}, {up, u_.data()}}, xn, n);
    for (std::int64_t i = 0; i < n * ff; ++i)
      g_[static_cast<std::size_t>(i)] =
          detail::silu(g_[static_cast<std::size_t>(i)]) * u_[static_cast<std::size_t>(i)];
    detail::matmul(*pool_, down, g_.data(), out, n);
  }

  // Routed experts plus the shared expert for n rows of xn_; the result goes to moe_out_.
  void moe(glm4_moe_layer_weights const& L, std::int64_t n) {
    auto const& hp = w_.hp;
    std::int64_t const h = hp.hidden_size, E = hp.num_experts, K = hp.experts_per_tok;
    std::vector<float> logits(static_cast<std::size_t>(n * E));
    detail::matmul(*pool_, L.router, xn_.data(), logits.data(), n);
    route_e_.resize(static_cast<std::size_t>(n * K));
    route_w_.resize(route_e_.size());
    for (std::int64_t t = 0; t < n; ++t)
      route(logits.data() + t * E, L.score_bias.data(), route_e_.data() + t * K,
            route_w_.data() + t * K);
    if (record_routes_) last_routes_.push_back(route_e_);
    // Each expert runs once over the tokens that picked it; every (token, slot) result is kept
    // apart and summed per token in slot order, so the sum does not depend on the batch.
    std::vector<float> slot_out(static_cast<std::size_t>(n * K * h));
    for (std::int64_t e = 0; e < E; ++e) {
      ex_tok_.clear();
      for (std::int64_t i = 0; i < n * K; ++i)
        if (route_e_[static_cast<std::size_t>(i)] == e)
          ex_tok_.push_back(static_cast<std::int32_t>(i));
      if (ex_tok_.empty()) continue;
      auto const m = static_cast<std::int64_t>(ex_tok_.size());
      ex_.resize(static_cast<std::size_t>(m * h));
      ey_.resize(ex_.size());
      for (std::int64_t j = 0; j < m; ++j)
        std::copy_n(xn_.data() + (ex_tok_[static_cast<std::size_t>(j)] / K) * h, h,
                    ex_.data() + j * h);
      swiglu(L.exp_gate[static_cast<std::size_t>(e)], L.exp_up[static_cast<std::size_t>(e)],
             L.exp_down[static_cast<std::size_t>(e)], ex_.data(), ey_.data(), m);
      for (std::int64_t j = 0; j < m; ++j)
        std::copy_n(
            ey_.data() + j * h, h,
            slot_out.data() + static_cast<std::int64_t>(ex_tok_[static_cast<std::size_t>(j)]) * h);
    }
    moe_out_.assign(static_cast<std::size_t>(n * h), 0.0f);
    if (hp.num_shared_experts > 0)
      swiglu(L.sh_gate, L.sh_up, L.sh_down, xn_.data(), moe_out_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* y = moe_out_.data() + t * h;
      for (std::int64_t i = 0; i < h; ++i) {
        float r = 0.0f;
        for (std::int64_t k = 0; k < K; ++k)
          r += route_w_[static_cast<std::size_t>(t * K + k)] *
               slot_out[static_cast<std::size_t>((t * K + k) * h + i)];
        y[i] = r + y[i];
      }
    }
  }

  void layer(int li, std::int64_t n) {
    auto const& hp = w_.hp;
    auto const& L = w_.layers[static_cast<std::size_t>(li)];
    std::int64_t const h = hp.hidden_size, hd = hp.head_dim;
    std::int64_t const nh = hp.num_heads, nkv = hp.num_kv_heads;
    std::int64_t const q_dim = hd * nh, kv_dim = hd * nkv;
    float const eps = hp.rms_norm_eps;
    double const theta = hp.rope_theta;

    for (std::int64_t t = 0; t < n; ++t)
      detail::rmsnorm(x_.data() + t * h, L.attn_norm.data(), xn_.data() + t * h, h, eps);
    detail::matmul(*pool_, L.q, xn_.data(), q_.data(), n);
    detail::matmul(*pool_, L.k, xn_.data(), kk_.data(), n);
    detail::matmul(*pool_, L.v, xn_.data(), vv_.data(), n);
    add_bias(q_.data(), L.q_bias, n, q_dim);
    add_bias(kk_.data(), L.k_bias, n, kv_dim);
    add_bias(vv_.data(), L.v_bias, n, kv_dim);

    // Optional per-head q/k RMSNorm, then NeoX RoPE on the first rope_dims, then K/V into pages.
    for (std::int64_t t = 0; t < n; ++t) {
      double const pos = static_cast<double>(kv_.position(t));
      for (std::int64_t hh = 0; hh < nh; ++hh) {
        float* qh = q_.data() + t * q_dim + hh * hd;
        if (!L.q_norm.empty()) detail::rmsnorm(qh, L.q_norm.data(), qh, hd, eps);
        detail::rope_neox_partial(qh, hp.rope_dims, pos, theta);
      }
      for (std::int64_t hh = 0; hh < nkv; ++hh) {
        float* kh = kk_.data() + t * kv_dim + hh * hd;
        if (!L.k_norm.empty()) detail::rmsnorm(kh, L.k_norm.data(), kh, hd, eps);
        detail::rope_neox_partial(kh, hp.rope_dims, pos, theta);
      }
      kv_.store(li, t, kk_.data() + t * kv_dim, vv_.data() + t * kv_dim);
    }

    kv_.attend(*pool_, li, n, nh, q_.data(), att_.data());

    // Pre-norm block: x += o(attn); x += ffn(ffn_norm(x)).
    detail::matmul(*pool_, L.o, att_.data(), xn_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* x = x_.data() + t * h;
      float* o = xn_.data() + t * h;
      for (std::int64_t i = 0; i < h; ++i) x[i] += o[i];
      detail::rmsnorm(x, L.ffn_norm.data(), o, h, eps);
    }
    if (L.moe) {
      moe(L, n);
    } else {
      moe_out_.resize(static_cast<std::size_t>(n * h));
      swiglu(L.gate, L.up, L.down, xn_.data(), moe_out_.data(), n);
    }
    for (std::int64_t i = 0; i < n * h; ++i)
      x_[static_cast<std::size_t>(i)] += moe_out_[static_cast<std::size_t>(i)];
  }

  glm4_moe_weights w_;
  std::unique_ptr<detail::thread_pool> pool_;
  paged_kv kv_;
  std::vector<float> x_, xn_, q_, att_, kk_, vv_, g_, u_, hn_, ex_, ey_, moe_out_, route_w_;
  std::vector<std::int32_t> route_e_, ex_tok_;
  bool record_routes_ = false;
  std::vector<std::vector<std::int32_t>> last_routes_;
};

}  // namespace tf::families::glm
