#pragma once
/// The GLM-4 dense forward pass on the CPU: one batched entry point over several streams, each with
/// its own page table into per-layer paged KV storage. A row's logits do not depend on what else
/// is in the batch or on the thread count.
#include <families/common/forward_rows.hpp>
#include <families/common/paged_attention.hpp>
#include <families/glm/detail/cpu_ops.hpp>
#include <families/glm/glm4_weights.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace tf::families::glm {

using families::batch_row;
using families::kv_dtype;
using families::kv_shape;

/// GLM-4 dense forward over f32 or f16 paged KV storage.
class glm4_forward {
 public:
  glm4_forward(glm4_weights w, kv_shape kv, int threads = 1)
      : w_(std::move(w)), pool_(std::make_unique<detail::thread_pool>(threads)) {
    if (threads < 1 || threads > 1024)
      throw error("tf: glm4 forward wants 1..1024 threads, got {}", threads);
    auto const& hp = w_.hp;
    kv_ = paged_kv(kv, hp.num_layers, hp.num_kv_heads, hp.head_dim, "glm4");
  }

  glm4_hparams const& hparams() const { return w_.hp; }
  glm4_weights const& weights() const { return w_; }
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
    gu_.resize(2 * g_.size());

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

  void layer(int li, std::int64_t n) {
    auto const& hp = w_.hp;
    auto const& L = w_.layers[static_cast<std::size_t>(li)];
    std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
    std::int64_t const nh = hp.num_heads, nkv = hp.num_kv_heads;
    std::int64_t const q_dim = hd * nh, kv_dim = hd * nkv;
    float const eps = hp.rms_norm_eps;
    double const theta = hp.rope_theta;

    for (std::int64_t t = 0; t < n; ++t)
      detail::rmsnorm(x_.data() + t * h, L.attn_norm.data(), xn_.data() + t * h, h, eps);
    detail::matmul_group(*pool_, {{L.q, q_.data()}, {L.k, kk_.data()}, {L.v, vv_.data()}},
                         xn_.data(), n);
    add_bias(q_.data(), L.q_bias, n, q_dim);
    add_bias(kk_.data(), L.k_bias, n, kv_dim);
    add_bias(vv_.data(), L.v_bias, n, kv_dim);

    // Partial interleaved RoPE, then K/V into the pages.
    for (std::int64_t t = 0; t < n; ++t) {
      double const pos = static_cast<double>(kv_.position(t));
      for (std::int64_t hh = 0; hh < nh; ++hh)
        detail::rope_interleaved(q_.data() + t * q_dim + hh * hd, hp.rope_dims, pos, theta);
      for (std::int64_t hh = 0; hh < nkv; ++hh)
        detail::rope_interleaved(kk_.data() + t * kv_dim + hh * hd, hp.rope_dims, pos, theta);
      kv_.store(li, t, kk_.data() + t * kv_dim, vv_.data() + t * kv_dim);
    }

    kv_.attend(*pool_, li, n, nh, q_.data(), att_.data());

    // Sandwich norms: h = x + post_attn_norm(attn), out = h + post_ffw_norm(mlp(ffn_norm(h))).
    detail::matmul(*pool_, L.o, att_.data(), xn_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* x = x_.data() + t * h;
      float* o = xn_.data() + t * h;
      detail::rmsnorm(o, L.post_attn_norm.data(), o, h, eps);
      for (std::int64_t i = 0; i < h; ++i) x[i] += o[i];
      detail::rmsnorm(x, L.ffn_norm.data(), o, h, eps);
    }
    if (L.gate_up.rows > 0) {
      detail::matmul(*pool_, L.gate_up, xn_.data(), gu_.data(), n);
      for (std::int64_t t = 0; t < n; ++t)
        for (std::int64_t i = 0; i < ff; ++i)
          g_[static_cast<std::size_t>(t * ff + i)] =
              detail::silu(gu_[static_cast<std::size_t>(t * 2 * ff + i)]) *
              gu_[static_cast<std::size_t>(t * 2 * ff + ff + i)];
    } else {
      detail::matmul_group(*pool_, {{L.gate, g_.data()}, {L.up, u_.data()}}, xn_.data(), n);
      for (std::int64_t i = 0; i < n * ff; ++i)
        g_[static_cast<std::size_t>(i)] =
            detail::silu(g_[static_cast<std::size_t>(i)]) * u_[static_cast<std::size_t>(i)];
    }
    detail::matmul(*pool_, L.down, g_.data(), xn_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* x = x_.data() + t * h;
      float* d = xn_.data() + t * h;
      detail::rmsnorm(d, L.post_ffw_norm.data(), d, h, eps);
      for (std::int64_t i = 0; i < h; ++i) x[i] += d[i];
    }
  }

  glm4_weights w_;
  std::unique_ptr<detail::thread_pool> pool_;
  paged_kv kv_;
  std::vector<float> x_, xn_, q_, att_, kk_, vv_, g_, u_, gu_, hn_;
};

}  // namespace tf::families::glm
