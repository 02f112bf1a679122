#pragma once
/// The Qwen3 forward pass on the CPU: one batched entry point over several streams, each with
/// its own page table into per-layer paged KV storage. A row's logits do not depend on what else
/// is in the batch or on the thread count.
#include <families/common/forward_rows.hpp>
#include <families/common/moe.hpp>
#include <families/common/paged_attention.hpp>
#include <families/qwen/detail/cpu_ops.hpp>
#include <families/qwen/qwen3_weights.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace tf::families::qwen {

using families::batch_row;
using families::kv_dtype;
using families::kv_shape;

/// Qwen3 forward over f32 or f16 paged KV storage; `Weights` is qwen3_weights, or the MoE
/// family's weights, whose layers may route their MLP through experts.
template <class Weights>
class basic_qwen3_forward {
 public:
  basic_qwen3_forward(Weights w, kv_shape kv, int threads = 1)
      : w_(std::move(w)), pool_(std::make_unique<detail::thread_pool>(threads)) {
    if (threads < 1 || threads > 1024)
      throw error("tf: qwen3 forward wants 1..1024 threads, got {}", threads);
    auto const& hp = w_.hp;
    kv_ = paged_kv(kv, hp.num_layers, hp.num_kv_heads, hp.head_dim, "qwen3");
  }

  auto const& hparams() const { return w_.hp; }
  Weights const& weights() const { return w_; }
  kv_shape kv() const { return kv_.shape(); }
  std::int64_t vocab_size() const { return w_.hp.vocab_size; }
  int threads() const { return pool_->size(); }

  /// How many logits rows forward() writes for `rows`.
  static std::int64_t logits_rows(std::span<batch_row const> rows) {
    return paged_kv::logits_rows(rows);
  }

  /// Runs every row; writes logits [logits_rows(rows), vocab] in row order.
  void forward(std::span<batch_row const> rows, float* logits) {
    auto const& hp = w_.hp;
    kv_.check(rows, hp.vocab_size);
    std::int64_t const n = kv_.gather(rows);
    std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
    std::int64_t const q_dim = hd * hp.num_heads, kv_dim = hd * hp.num_kv_heads;
    x_.resize(static_cast<std::size_t>(n * h));
    xn_.resize(x_.size());
    q_.resize(static_cast<std::size_t>(n * q_dim));
    att_.resize(q_.size());
    kk_.resize(static_cast<std::size_t>(n * kv_dim));
    vv_.resize(kk_.size());
    g_.resize(static_cast<std::size_t>(n * ff));
    u_.resize(g_.size());

    kv_.embed(*pool_, w_.embd, x_.data(), n, h);

    for (int l = 0; l < hp.num_layers; ++l) layer(l, n);

    // Final norm and head, only for the tokens that want logits.
    kv_.head(*pool_, w_.output_norm, w_.output, x_.data(), hn_, h, hp.rms_norm_eps, logits);
  }

 private:
  void layer(int li, std::int64_t n) {
    auto const& hp = w_.hp;
    auto const& L = w_.layers[static_cast<std::size_t>(li)];
    std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
    std::int64_t const nh = hp.num_heads, nkv = hp.num_kv_heads;
    std::int64_t const q_dim = hd * nh, kv_dim = hd * nkv;
    float const eps = hp.rms_norm_eps;
    double const theta = hp.rope_theta;
    double const pos_scale = 1.0 / static_cast<double>(hp.rope_scaling_factor);

    for (std::int64_t t = 0; t < n; ++t)
      detail::rmsnorm(x_.data() + t * h, L.attn_norm.data(), xn_.data() + t * h, h, eps);
    detail::matmul_group(*pool_, {{L.q, q_.data()}, {L.k, kk_.data()}, {L.v, vv_.data()}},
                         xn_.data(), n);

    // Per-head q/k norms, RoPE (angles once per token, for all its heads), then K/V into the
    // pages.
    rope_cs_.resize(static_cast<std::size_t>(hd));
    float* c = rope_cs_.data();
    float* sn = c + hd / 2;
    for (std::int64_t t = 0; t < n; ++t) {
      double const pos = static_cast<double>(kv_.position(t)) * pos_scale;
      detail::rope_neox_angles(pos, theta, hd, c, sn);
      for (std::int64_t hh = 0; hh < nh; ++hh) {
        float* qh = q_.data() + t * q_dim + hh * hd;
        detail::rmsnorm(qh, L.q_norm.data(), qh, hd, eps);
        detail::rope_neox_apply(qh, hd, c, sn);
      }
      for (std::int64_t hh = 0; hh < nkv; ++hh) {
        float* kh = kk_.data() + t * kv_dim + hh * hd;
        detail::rmsnorm(kh, L.k_norm.data(), kh, hd, eps);
        detail::rope_neox_apply(kh, hd, c, sn);
      }
      kv_.store(li, t, kk_.data() + t * kv_dim, vv_.data() + t * kv_dim);
    }

    kv_.attend(*pool_, li, n, nh, q_.data(), att_.data());

    detail::matmul(*pool_, L.o, att_.data(), xn_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* x = x_.data() + t * h;
      float* o = xn_.data() + t * h;
      for (std::int64_t i = 0; i < h; ++i) x[i] += o[i];
      detail::rmsnorm(x, L.ffn_norm.data(), o, h, eps);
    }
    if constexpr (requires { L.experts; })
      if (!L.experts.empty()) {
        experts(L, n);
        return;
      }
    detail::matmul_group(*pool_, {{L.gate, g_.data()}, {L.up, u_.data()}}, xn_.data(), n);
    for (std::int64_t i = 0; i < n * ff; ++i)
      g_[static_cast<std::size_t>(i)] =
          detail::silu(g_[static_cast<std::size_t>(i)]) * u_[static_cast<std::size_t>(i)];
    detail::matmul(*pool_, L.down, g_.data(), xn_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* x = x_.data() + t * h;
      float const* d = xn_.data() + t * h;
      for (std::int64_t i = 0; i < h; ++i) x[i] += d[i];
    }
  }

  // The routed MLP: softmax over the router, top-k, optional renormalisation, experts added to x.
  template <class Layer>
  void experts(Layer const& L, std::int64_t n) {
    auto const& hp = w_.hp;
    int const ne = hp.num_experts, k = hp.num_experts_per_tok;
    router_.resize(static_cast<std::size_t>(n * ne));
    picks_.resize(static_cast<std::size_t>(n * k));
    detail::matmul(*pool_, L.router, xn_.data(), router_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* p = router_.data() + t * ne;
      float const mx = *std::max_element(p, p + ne);
      double z = 0.0;
      for (int e = 0; e < ne; ++e) z += std::exp(static_cast<double>(p[e] - mx));
      for (int e = 0; e < ne; ++e)
        p[e] = static_cast<float>(std::exp(static_cast<double>(p[e] - mx)) / z);
      auto* pk = picks_.data() + t * k;
      moe::top_k(p, ne, k, pk);
      if (hp.norm_topk_prob) {
        float sum = 0.0f;
        for (int s = 0; s < k; ++s) sum += pk[s].weight;
        for (int s = 0; s < k; ++s) pk[s].weight /= sum;
      }
    }
    moe::run_experts(*pool_, L.experts, xn_.data(), n, picks_.data(), k, x_.data());
  }

  Weights w_;
  std::unique_ptr<detail::thread_pool> pool_;
  paged_kv kv_;
  std::vector<float> x_, xn_, q_, att_, kk_, vv_, g_, u_, hn_, router_, rope_cs_;
  std::vector<moe::expert_pick> picks_;
};

using qwen3_forward = basic_qwen3_forward<qwen3_weights>;

}  // namespace tf::families::qwen
