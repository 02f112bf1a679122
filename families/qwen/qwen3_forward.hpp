#pragma once
/// The Qwen3 forward pass on the CPU: one batched entry point over several streams, each with
/// its own page table into per-layer paged KV storage. A row's logits do not depend on what else
/// is in the batch or on the thread count.
#include <families/common/forward_rows.hpp>
#include <families/common/moe.hpp>
#include <families/qwen/detail/cpu_ops.hpp>
#include <families/qwen/qwen3_weights.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>
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
      : w_(std::move(w)), kv_(kv), pool_(std::make_unique<detail::thread_pool>(threads)) {
    if (threads < 1 || threads > 1024)
      throw error("tf: qwen3 forward wants 1..1024 threads, got {}", threads);
    if (kv_.num_pages <= 0 || kv_.page_tokens <= 0)
      throw error("tf: qwen3 KV storage needs pages > 0 and page_tokens > 0, got {} and {}",
                  kv_.num_pages, kv_.page_tokens);
    auto const& hp = w_.hp;
    page_floats_ = static_cast<std::size_t>(kv_.page_tokens) *
                   static_cast<std::size_t>(hp.num_kv_heads) *
                   static_cast<std::size_t>(hp.head_dim);
    std::size_t const per_layer = page_floats_ * static_cast<std::size_t>(kv_.num_pages);
    auto const layers = static_cast<std::size_t>(hp.num_layers);
    if (kv_.dtype == kv_dtype::f32) {
      k_.assign(layers, std::vector<float>(per_layer, 0.0f));
      v_.assign(layers, std::vector<float>(per_layer, 0.0f));
    } else {
      k16_.assign(layers, std::vector<std::uint16_t>(per_layer, 0));
      v16_.assign(layers, std::vector<std::uint16_t>(per_layer, 0));
    }
  }

  auto const& hparams() const { return w_.hp; }
  Weights const& weights() const { return w_; }
  kv_shape kv() const { return kv_; }
  std::int64_t vocab_size() const { return w_.hp.vocab_size; }
  int threads() const { return pool_->size(); }

  /// How many logits rows forward() writes for `rows`.
  static std::int64_t logits_rows(std::span<batch_row const> rows) {
    std::int64_t n = 0;
    for (auto const& r : rows) n += r.all_logits ? static_cast<std::int64_t>(r.tokens.size()) : 1;
    return n;
  }

  /// Runs every row; writes logits [logits_rows(rows), vocab] in row order.
  void forward(std::span<batch_row const> rows, float* logits) {
    auto const& hp = w_.hp;
    check(rows);
    std::int64_t const n = gather(rows);
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

    pool_->parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        float* x = x_.data() + t * h;
        kernels::cpu::dequantize_row(w_.embd.type, w_.embd.row(tok_[static_cast<std::size_t>(t)]),
                                     x, h);
      }
    });

    for (int l = 0; l < hp.num_layers; ++l) layer(l, n);

    // Final norm and head, only for the tokens that want logits.
    std::int64_t const m = static_cast<std::int64_t>(out_tok_.size());
    hn_.resize(static_cast<std::size_t>(m * h));
    for (std::int64_t i = 0; i < m; ++i)
      detail::rmsnorm(x_.data() + out_tok_[static_cast<std::size_t>(i)] * h, w_.output_norm.data(),
                      hn_.data() + i * h, h, hp.rms_norm_eps);
    detail::matmul(*pool_, w_.output, hn_.data(), logits, m);
  }

 private:
  void check(std::span<batch_row const> rows) const {
    if (rows.empty()) throw error("tf: qwen3 forward got an empty batch");
    auto const& hp = w_.hp;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto const& row = rows[r];
      if (row.tokens.empty()) throw error("tf: qwen3 forward: batch row {} has no tokens", r);
      if (row.start_pos < 0)
        throw error("tf: qwen3 forward: batch row {} starts at position {}", r, row.start_pos);
      std::int64_t const end =
          static_cast<std::int64_t>(row.start_pos) + static_cast<std::int64_t>(row.tokens.size());
      std::int64_t const pages_needed = (end + kv_.page_tokens - 1) / kv_.page_tokens;
      if (static_cast<std::int64_t>(row.page_table.size()) < pages_needed)
        throw error(
            "tf: qwen3 forward: batch row {} reaches position {} and needs {} pages of {} "
            "tokens, its page table has {}",
            r, end - 1, pages_needed, kv_.page_tokens, row.page_table.size());
      for (std::int64_t p = 0; p < pages_needed; ++p) {
        auto id = row.page_table[static_cast<std::size_t>(p)];
        if (id < 0 || id >= kv_.num_pages)
          throw error("tf: qwen3 forward: batch row {} page_table[{}] = {} is outside 0..{}", r, p,
                      id, kv_.num_pages - 1);
      }
      for (std::size_t i = 0; i < row.tokens.size(); ++i)
        if (row.tokens[i] < 0 || row.tokens[i] >= hp.vocab_size)
          throw error(
              "tf: qwen3 forward: batch row {} token {} is {}, outside the vocabulary of "
              "{}",
              r, i, row.tokens[i], hp.vocab_size);
    }
  }

  // Flattens the rows into per-token arrays; returns the token count.
  std::int64_t gather(std::span<batch_row const> rows) {
    tok_.clear();
    pos_.clear();
    row_of_.clear();
    out_tok_.clear();
    rows_.assign(rows.begin(), rows.end());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto const& row = rows[r];
      for (std::size_t i = 0; i < row.tokens.size(); ++i) {
        if (row.all_logits || i + 1 == row.tokens.size())
          out_tok_.push_back(static_cast<std::int64_t>(tok_.size()));
        tok_.push_back(row.tokens[i]);
        pos_.push_back(row.start_pos + static_cast<std::int32_t>(i));
        row_of_.push_back(static_cast<std::int32_t>(r));
      }
    }
    return static_cast<std::int64_t>(tok_.size());
  }

  // Element offset of position `pos` of token t's stream in one layer's storage.
  std::size_t kv_at(std::size_t t, std::int32_t pos) const {
    auto const& row = rows_[static_cast<std::size_t>(row_of_[t])];
    auto const page = row.page_table[static_cast<std::size_t>(pos / kv_.page_tokens)];
    std::size_t const slot = static_cast<std::size_t>(pos % kv_.page_tokens);
    return static_cast<std::size_t>(page) * page_floats_ +
           slot * static_cast<std::size_t>(w_.hp.num_kv_heads * w_.hp.head_dim);
  }

  // Causal attention over the pages. T is float (f32 KV) or std::uint16_t (f16 KV).
  template <class T>
  void attention(std::int64_t n, T const* K, T const* V) {
    auto const& hp = w_.hp;
    std::int64_t const hd = hp.head_dim, nh = hp.num_heads;
    std::int64_t const q_dim = hd * nh, group = nh / hp.num_kv_heads;
    float const scale = 1.0f / std::sqrt(static_cast<float>(hd));
    pool_->parallel_for(n * nh, [&](std::int64_t w0, std::int64_t w1) {
      thread_local std::vector<float> scores, qs;
      qs.resize(static_cast<std::size_t>(hd));
      for (std::int64_t w = w0; w < w1; ++w) {
        std::int64_t const t = w / nh, hh = w % nh, kvh = hh / group;
        std::int32_t const p = pos_[static_cast<std::size_t>(t)];
        std::int32_t const lo = 0;
        float const* qh = q_.data() + t * q_dim + hh * hd;
        for (std::int64_t d = 0; d < hd; ++d)
          qs[static_cast<std::size_t>(d)] = round_kv<T>(qh[d] * scale);
        scores.resize(static_cast<std::size_t>(p - lo + 1));
        float mx = -std::numeric_limits<float>::infinity();
        for (std::int32_t j = lo; j <= p; ++j) {
          T const* kh = K + kv_at(static_cast<std::size_t>(t), j) + kvh * hd;
          float const s = dot_kv(qs.data(), kh, hd);
          scores[static_cast<std::size_t>(j - lo)] = s;
          mx = std::max(mx, s);
        }
        double z = 0.0;
        for (auto& s : scores) {
          s = std::exp(s - mx);
          z += s;
        }
        float const inv = static_cast<float>(1.0 / z);
        float* out = att_.data() + t * q_dim + hh * hd;
        std::fill_n(out, hd, 0.0f);
        for (std::int32_t j = lo; j <= p; ++j) {
          T const* vh = V + kv_at(static_cast<std::size_t>(t), j) + kvh * hd;
          float const pj = round_kv<T>(scores[static_cast<std::size_t>(j - lo)] * inv);
          for (std::int64_t d = 0; d < hd; ++d) out[d] += pj * to_f32(vh[d]);
        }
      }
    });
  }

  void rope(float* x, std::int64_t hd, double pos, double theta) const {
    detail::rope_neox(x, hd, pos, theta);
  }

  static float to_f32(float v) { return v; }
  static float to_f32(std::uint16_t v) { return kernels::cpu::fp16_to_fp32(v); }
  template <class T>
  static float round_kv(float v) {
    if constexpr (std::is_same_v<T, float>)
      return v;
    else
      return kernels::cpu::fp16_to_fp32(kernels::cpu::fp32_to_fp16(v));
  }
  static float dot_kv(float const* q, float const* k, std::int64_t n) {
    return detail::dot_f32(q, k, n);
  }
  static float dot_kv(float const* q, std::uint16_t const* k, std::int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += q[i + j] * kernels::cpu::fp16_to_fp32(k[i + j]);
    for (int j = 0; i < n; ++i, ++j) acc[j] += q[i] * kernels::cpu::fp16_to_fp32(k[i]);
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }

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
    detail::matmul(*pool_, L.q, xn_.data(), q_.data(), n);
    detail::matmul(*pool_, L.k, xn_.data(), kk_.data(), n);
    detail::matmul(*pool_, L.v, xn_.data(), vv_.data(), n);

    // Per-head q/k norms, RoPE, then K/V into the pages.
    for (std::int64_t t = 0; t < n; ++t) {
      double const pos = static_cast<double>(pos_[static_cast<std::size_t>(t)]) * pos_scale;
      for (std::int64_t hh = 0; hh < nh; ++hh) {
        float* qh = q_.data() + t * q_dim + hh * hd;
        detail::rmsnorm(qh, L.q_norm.data(), qh, hd, eps);
        rope(qh, hd, pos, theta);
      }
      std::size_t const at = kv_at(static_cast<std::size_t>(t), pos_[static_cast<std::size_t>(t)]);
      for (std::int64_t hh = 0; hh < nkv; ++hh) {
        float* kh = kk_.data() + t * kv_dim + hh * hd;
        detail::rmsnorm(kh, L.k_norm.data(), kh, hd, eps);
        rope(kh, hd, pos, theta);
      }
      float const* ks = kk_.data() + t * kv_dim;
      float const* vs = vv_.data() + t * kv_dim;
      if (kv_.dtype == kv_dtype::f32) {
        std::copy_n(ks, kv_dim, k_[static_cast<std::size_t>(li)].data() + at);
        std::copy_n(vs, kv_dim, v_[static_cast<std::size_t>(li)].data() + at);
      } else {
        auto* kd = k16_[static_cast<std::size_t>(li)].data() + at;
        auto* vd = v16_[static_cast<std::size_t>(li)].data() + at;
        for (std::int64_t i = 0; i < kv_dim; ++i) {
          kd[i] = kernels::cpu::fp32_to_fp16(ks[i]);
          vd[i] = kernels::cpu::fp32_to_fp16(vs[i]);
        }
      }
    }

    if (kv_.dtype == kv_dtype::f32)
      attention(n, k_[static_cast<std::size_t>(li)].data(),
                v_[static_cast<std::size_t>(li)].data());
    else
      attention(n, k16_[static_cast<std::size_t>(li)].data(),
                v16_[static_cast<std::size_t>(li)].data());

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
    detail::matmul(*pool_, L.gate, xn_.data(), g_.data(), n);
    detail::matmul(*pool_, L.up, xn_.data(), u_.data(), n);
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
  kv_shape kv_;
  std::unique_ptr<detail::thread_pool> pool_;
  std::size_t page_floats_ = 0;
  // [num_pages, page_tokens, n_kv_heads, head_dim] per layer
  std::vector<std::vector<float>> k_, v_;
  std::vector<std::vector<std::uint16_t>> k16_, v16_;
  std::vector<batch_row> rows_;
  std::vector<std::int32_t> tok_, pos_, row_of_;
  std::vector<std::int64_t> out_tok_;
  std::vector<float> x_, xn_, q_, att_, kk_, vv_, g_, u_, hn_, router_;
  std::vector<moe::expert_pick> picks_;
};

using qwen3_forward = basic_qwen3_forward<qwen3_weights>;

}  // namespace tf::families::qwen
