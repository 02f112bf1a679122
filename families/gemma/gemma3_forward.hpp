#pragma once
/// The Gemma 3 forward pass on the CPU: one batched entry point over several streams, each with
/// its own page table into per-layer paged KV storage. A row's logits do not depend on what else
/// is in the batch or on the thread count.
#include <families/common/forward_rows.hpp>
#include <families/common/paged_attention.hpp>
#include <families/gemma/detail/cpu_ops.hpp>
#include <families/gemma/gemma3_weights.hpp>
#include <kernels/cpu/kv_rows.hpp>
#include <kernels/cpu/vec_math.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace tf::families::gemma {

using families::batch_row;
using families::kv_dtype;
using families::kv_shape;

/// Gemma 3 forward over paged KV storage (f32 or f16).
class gemma3_forward {
 public:
  gemma3_forward(gemma3_weights w, kv_shape kv, int threads = 1)
      : w_(std::move(w)), pool_(std::make_unique<detail::thread_pool>(threads)) {
    if (threads < 1 || threads > 1024)
      throw error("tf: gemma3 forward wants 1..1024 threads, got {}", threads);
    auto const& hp = w_.hp;
    kv_ = paged_kv(kv, hp.num_layers, hp.num_kv_heads, hp.head_dim, "gemma3");
  }

  gemma3_hparams const& hparams() const { return w_.hp; }
  gemma3_weights const& weights() const { return w_; }
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
    float const emb_scale = std::sqrt(static_cast<float>(h));
    for (auto& v : x_) v *= emb_scale;

    rope_angles(n);
    for (int l = 0; l < hp.num_layers; ++l) layer(l, n);

    kv_.head(*pool_, w_.output_norm, w_.output, x_.data(), hn_, h, hp.rms_norm_eps, logits);
    if (hp.final_logit_softcap > 0.0f) {
      constexpr std::int64_t chunk = 8192;
      std::int64_t const total = logits_rows(rows) * hp.vocab_size;
      pool_->parallel_for((total + chunk - 1) / chunk, [&](std::int64_t c0, std::int64_t c1) {
        std::int64_t const end = std::min(total, c1 * chunk);
        kernels::cpu::vec_math::softcap(logits + c0 * chunk, end - c0 * chunk,
                                        hp.final_logit_softcap);
      });
    }
  }

 private:
  // cos | sin of every token's RoPE angles, [n, head_dim] per layer kind (0: sliding, 1: global).
  void rope_angles(std::int64_t n) {
    auto const& hp = w_.hp;
    std::int64_t const hd = hp.head_dim;
    for (int kind = 0; kind < 2; ++kind) {
      double const theta = kind == 0 ? hp.rope_theta_local : hp.rope_theta_global;
      float const freq_scale = kind == 0 ? 1.0f : 1.0f / hp.rope_scaling_factor;
      auto& cs = rope_cs_[kind];
      cs.resize(static_cast<std::size_t>(n * hd));
      for (std::int64_t t = 0; t < n; ++t) {
        detail::rope_neox_angles(static_cast<double>(kv_.position(t)), theta, hd,
                                 cs.data() + t * hd, cs.data() + t * hd + hd / 2, freq_scale);
      }
    }
  }

  // GeGLU as llama.cpp's f16 path rounds it: by table, built once per process.
  static kernels::cpu::kv_rows::gelu_f16_table<detail::gelu_tanh> const& gelu_f16() {
    static kernels::cpu::kv_rows::gelu_f16_table<detail::gelu_tanh> const table;
    return table;
  }

  // g [n, ff] = gelu(g) * u, across the pool by tokens.
  void geglu(std::int64_t n, std::int64_t ff) {
    bool const f16 = kv_.shape().dtype == kv_dtype::f16;
    pool_->parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      float* g = g_.data() + t0 * ff;
      float const* u = u_.data() + t0 * ff;
      std::int64_t const m = (t1 - t0) * ff;
      if (f16) {
        gelu_f16().mul(g, u, g, m);
      } else {
        kernels::cpu::vec_math::gelu_tanh_mul(g, u, g, m);
      }
    });
  }

  template <class Fn>
  void per_token(std::int64_t n, Fn&& fn) {
    pool_->parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) fn(t);
    });
  }

  void layer(int li, std::int64_t n) {
    auto const& hp = w_.hp;
    auto const& L = w_.layers[static_cast<std::size_t>(li)];
    std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
    std::int64_t const nh = hp.num_heads, nkv = hp.num_kv_heads;
    std::int64_t const q_dim = hd * nh, kv_dim = hd * nkv;
    float const eps = hp.rms_norm_eps;
    bool const sliding = hp.is_sliding(li);
    auto const& cs = rope_cs_[sliding ? 0 : 1];

    // The per-token steps run across the pool too: each token's are independent of the others'.
    per_token(n, [&](std::int64_t t) {
      detail::rmsnorm(x_.data() + t * h, L.attn_norm.data(), xn_.data() + t * h, h, eps);
    });
    detail::matmul_group(*pool_, {{L.q, q_.data()}, {L.k, kk_.data()}, {L.v, vv_.data()}},
                         xn_.data(), n);

    // Per-head q/k norms, RoPE, then K/V into the pages.
    per_token(n, [&](std::int64_t t) {
      float const* c = cs.data() + t * hd;
      float const* sn = c + hd / 2;
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
    });

    // A key is visible on a sliding layer iff q_pos - k_pos < window.
    kv_.attend(*pool_, li, n, nh, q_.data(), att_.data(),
               1.0f / std::sqrt(hp.query_pre_attn_scalar), sliding ? hp.sliding_window : 0);

    detail::matmul(*pool_, L.o, att_.data(), xn_.data(), n);
    per_token(n, [&](std::int64_t t) {
      float* x = x_.data() + t * h;
      float* o = xn_.data() + t * h;
      detail::rmsnorm(o, L.post_attn_norm.data(), o, h, eps);
      for (std::int64_t i = 0; i < h; ++i) x[i] += o[i];
      detail::rmsnorm(x, L.ffn_norm.data(), o, h, eps);
    });
    detail::matmul_group(*pool_, {{L.gate, g_.data()}, {L.up, u_.data()}}, xn_.data(), n);
    geglu(n, ff);
    detail::matmul(*pool_, L.down, g_.data(), xn_.data(), n);
    per_token(n, [&](std::int64_t t) {
      float* x = x_.data() + t * h;
      float* d = xn_.data() + t * h;
      detail::rmsnorm(d, L.post_ffw_norm.data(), d, h, eps);
      for (std::int64_t i = 0; i < h; ++i) x[i] += d[i];
    });
  }

  gemma3_weights w_;
  std::unique_ptr<detail::thread_pool> pool_;
  paged_kv kv_;
  std::vector<float> x_, xn_, q_, att_, kk_, vv_, g_, u_, hn_;
  std::vector<float> rope_cs_[2];
};

}  // namespace tf::families::gemma
