#pragma once
/// The Gemma 3 forward pass on the CPU: one batched entry point over several streams, each with
/// its own page table into per-layer paged KV storage. A row's logits do not depend on what else
/// is in the batch or on the thread count.
#include <families/common/forward_rows.hpp>
#include <families/gemma/detail/cpu_ops.hpp>
#include <families/gemma/gemma3_weights.hpp>
#include <kernels/cpu/f16_rows.hpp>
#include <kernels/cpu/vec_math.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace tf::families::gemma {

using families::batch_row;
using families::kv_dtype;
using families::kv_shape;

/// Gemma 3 forward over f32 paged KV storage.
class gemma3_forward {
 public:
  gemma3_forward(gemma3_weights w, kv_shape kv, int threads = 1)
      : w_(std::move(w)), kv_(kv), pool_(std::make_unique<detail::thread_pool>(threads)) {
    if (threads < 1 || threads > 1024)
      throw error("tf: gemma3 forward wants 1..1024 threads, got {}", threads);
    if (kv_.num_pages <= 0 || kv_.page_tokens <= 0)
      throw error("tf: gemma3 KV storage needs pages > 0 and page_tokens > 0, got {} and {}",
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

  gemma3_hparams const& hparams() const { return w_.hp; }
  gemma3_weights const& weights() const { return w_; }
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

    float const emb_scale = std::sqrt(static_cast<float>(h));
    pool_->parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        float* x = x_.data() + t * h;
        kernels::cpu::dequantize_row(w_.embd.type, w_.embd.row(tok_[static_cast<std::size_t>(t)]),
                                     x, h);
        for (std::int64_t i = 0; i < h; ++i) x[i] *= emb_scale;
      }
    });

    rope_angles(n);
    for (int l = 0; l < hp.num_layers; ++l) layer(l, n);

    // Final norm and head, only for the tokens that want logits.
    std::int64_t const m = static_cast<std::int64_t>(out_tok_.size());
    hn_.resize(static_cast<std::size_t>(m * h));
    for (std::int64_t i = 0; i < m; ++i)
      detail::rmsnorm(x_.data() + out_tok_[static_cast<std::size_t>(i)] * h, w_.output_norm.data(),
                      hn_.data() + i * h, h, hp.rms_norm_eps);
    detail::matmul(*pool_, w_.output, hn_.data(), logits, m);
    if (hp.final_logit_softcap > 0.0f) {
      constexpr std::int64_t chunk = 8192;
      std::int64_t const total = m * hp.vocab_size;
      pool_->parallel_for((total + chunk - 1) / chunk, [&](std::int64_t c0, std::int64_t c1) {
        std::int64_t const end = std::min(total, c1 * chunk);
        kernels::cpu::vec_math::softcap(logits + c0 * chunk, end - c0 * chunk,
                                        hp.final_logit_softcap);
      });
    }
  }

 private:
  void check(std::span<batch_row const> rows) const {
    if (rows.empty()) throw error("tf: gemma3 forward got an empty batch");
    auto const& hp = w_.hp;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto const& row = rows[r];
      if (row.tokens.empty()) throw error("tf: gemma3 forward: batch row {} has no tokens", r);
      if (row.start_pos < 0)
        throw error("tf: gemma3 forward: batch row {} starts at position {}", r, row.start_pos);
      std::int64_t const end =
          static_cast<std::int64_t>(row.start_pos) + static_cast<std::int64_t>(row.tokens.size());
      std::int64_t const pages_needed = (end + kv_.page_tokens - 1) / kv_.page_tokens;
      if (static_cast<std::int64_t>(row.page_table.size()) < pages_needed)
        throw error(
            "tf: gemma3 forward: batch row {} reaches position {} and needs {} pages of {} "
            "tokens, its page table has {}",
            r, end - 1, pages_needed, kv_.page_tokens, row.page_table.size());
      for (std::int64_t p = 0; p < pages_needed; ++p) {
        auto id = row.page_table[static_cast<std::size_t>(p)];
        if (id < 0 || id >= kv_.num_pages)
          throw error("tf: gemma3 forward: batch row {} page_table[{}] = {} is outside 0..{}", r, p,
                      id, kv_.num_pages - 1);
      }
      for (std::size_t i = 0; i < row.tokens.size(); ++i)
        if (row.tokens[i] < 0 || row.tokens[i] >= hp.vocab_size)
          throw error(
              "tf: gemma3 forward: batch row {} token {} is {}, outside the vocabulary of "
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

  // Causal attention over the pages; a key is visible on a sliding layer iff
  // q_pos - k_pos < window. T is float (f32 KV) or std::uint16_t (f16 KV).
  template <class T>
  void attention(int li, std::int64_t n, T const* K, T const* V) {
    auto const& hp = w_.hp;
    std::int64_t const hd = hp.head_dim, nh = hp.num_heads;
    std::int64_t const q_dim = hd * nh, group = nh / hp.num_kv_heads;
    bool const sliding = hp.is_sliding(li);
    float const scale = 1.0f / std::sqrt(hp.query_pre_attn_scalar);
    pool_->parallel_for(n * nh, [&](std::int64_t w0, std::int64_t w1) {
      thread_local std::vector<float> scores, qs;
      qs.resize(static_cast<std::size_t>(hd));
      for (std::int64_t w = w0; w < w1; ++w) {
        std::int64_t const t = w / nh, hh = w % nh, kvh = hh / group;
        std::int32_t const p = pos_[static_cast<std::size_t>(t)];
        std::int32_t const lo = sliding ? std::max(0, p - hp.sliding_window + 1) : 0;
        float const* qh = q_.data() + t * q_dim + hh * hd;
        if constexpr (std::is_same_v<T, float>) {
          for (std::int64_t d = 0; d < hd; ++d) qs[static_cast<std::size_t>(d)] = qh[d] * scale;
        } else {
          kernels::cpu::f16_rows::scale_round(qh, scale, qs.data(), hd);
        }
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
          if constexpr (std::is_same_v<T, float>) {
            for (std::int64_t d = 0; d < hd; ++d) out[d] += pj * vh[d];
          } else {
            kernels::cpu::f16_rows::axpy(pj, vh, out, hd);
          }
        }
      }
    });
  }

  // cos | sin of every token's RoPE angles, [n, head_dim] per layer kind (0: sliding, 1: global).
  void rope_angles(std::int64_t n) {
    auto const& hp = w_.hp;
    std::int64_t const hd = hp.head_dim;
    for (int kind = 0; kind < 2; ++kind) {
      double const theta = kind == 0 ? hp.rope_theta_local : hp.rope_theta_global;
      double const pos_scale = kind == 0 ? 1.0 : 1.0 / static_cast<double>(hp.rope_scaling_factor);
      auto& cs = rope_cs_[kind];
      cs.resize(static_cast<std::size_t>(n * hd));
      for (std::int64_t t = 0; t < n; ++t) {
        double const pos = static_cast<double>(pos_[static_cast<std::size_t>(t)]) * pos_scale;
        detail::rope_neox_angles(pos, theta, hd, cs.data() + t * hd, cs.data() + t * hd + hd / 2);
      }
    }
  }

  // GeGLU as llama.cpp's f16 path rounds it: by table, built once per process.
  static kernels::cpu::f16_rows::gelu_f16_table<detail::gelu_tanh> const& gelu_f16() {
    static kernels::cpu::f16_rows::gelu_f16_table<detail::gelu_tanh> const table;
    return table;
  }

  // g [n, ff] = gelu(g) * u, across the pool by tokens.
  void geglu(std::int64_t n, std::int64_t ff) {
    pool_->parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      float* g = g_.data() + t0 * ff;
      float const* u = u_.data() + t0 * ff;
      std::int64_t const m = (t1 - t0) * ff;
      if (kv_.dtype == kv_dtype::f16) {
        gelu_f16().mul(g, u, g, m);
      } else {
        kernels::cpu::vec_math::gelu_tanh_mul(g, u, g, m);
      }
    });
  }
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
    return kernels::cpu::f16_rows::dot(q, k, n);
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

    for (std::int64_t t = 0; t < n; ++t)
      detail::rmsnorm(x_.data() + t * h, L.attn_norm.data(), xn_.data() + t * h, h, eps);
    detail::matmul(*pool_, L.q, xn_.data(), q_.data(), n);
    detail::matmul(*pool_, L.k, xn_.data(), kk_.data(), n);
    detail::matmul(*pool_, L.v, xn_.data(), vv_.data(), n);

    // Per-head q/k norms, RoPE, then K/V into the pages.
    for (std::int64_t t = 0; t < n; ++t) {
      float const* c = cs.data() + t * hd;
      float const* sn = c + hd / 2;
      for (std::int64_t hh = 0; hh < nh; ++hh) {
        float* qh = q_.data() + t * q_dim + hh * hd;
        detail::rmsnorm(qh, L.q_norm.data(), qh, hd, eps);
        detail::rope_neox_apply(qh, hd, c, sn);
      }
      std::size_t const at = kv_at(static_cast<std::size_t>(t), pos_[static_cast<std::size_t>(t)]);
      for (std::int64_t hh = 0; hh < nkv; ++hh) {
        float* kh = kk_.data() + t * kv_dim + hh * hd;
        detail::rmsnorm(kh, L.k_norm.data(), kh, hd, eps);
        detail::rope_neox_apply(kh, hd, c, sn);
      }
      float const* ks = kk_.data() + t * kv_dim;
      float const* vs = vv_.data() + t * kv_dim;
      if (kv_.dtype == kv_dtype::f32) {
        std::copy_n(ks, kv_dim, k_[static_cast<std::size_t>(li)].data() + at);
        std::copy_n(vs, kv_dim, v_[static_cast<std::size_t>(li)].data() + at);
      } else {
        auto* kd = k16_[static_cast<std::size_t>(li)].data() + at;
        auto* vd = v16_[static_cast<std::size_t>(li)].data() + at;
        kernels::cpu::f16_rows::to_f16(ks, kd, kv_dim);
        kernels::cpu::f16_rows::to_f16(vs, vd, kv_dim);
      }
    }

    if (kv_.dtype == kv_dtype::f32)
      attention(li, n, k_[static_cast<std::size_t>(li)].data(),
                v_[static_cast<std::size_t>(li)].data());
    else
      attention(li, n, k16_[static_cast<std::size_t>(li)].data(),
                v16_[static_cast<std::size_t>(li)].data());

    detail::matmul(*pool_, L.o, att_.data(), xn_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* x = x_.data() + t * h;
      float* o = xn_.data() + t * h;
      detail::rmsnorm(o, L.post_attn_norm.data(), o, h, eps);
      for (std::int64_t i = 0; i < h; ++i) x[i] += o[i];
      detail::rmsnorm(x, L.ffn_norm.data(), o, h, eps);
    }
    detail::matmul(*pool_, L.gate, xn_.data(), g_.data(), n);
    detail::matmul(*pool_, L.up, xn_.data(), u_.data(), n);
    geglu(n, ff);
    detail::matmul(*pool_, L.down, g_.data(), xn_.data(), n);
    for (std::int64_t t = 0; t < n; ++t) {
      float* x = x_.data() + t * h;
      float* d = xn_.data() + t * h;
      detail::rmsnorm(d, L.post_ffw_norm.data(), d, h, eps);
      for (std::int64_t i = 0; i < h; ++i) x[i] += d[i];
    }
  }

  gemma3_weights w_;
  kv_shape kv_;
  std::unique_ptr<detail::thread_pool> pool_;
  std::size_t page_floats_ = 0;
  // [num_pages, page_tokens, n_kv_heads, head_dim] per layer
  std::vector<std::vector<float>> k_, v_;
  std::vector<std::vector<std::uint16_t>> k16_, v16_;
  std::vector<batch_row> rows_;
  std::vector<std::int32_t> tok_, pos_, row_of_;
  std::vector<std::int64_t> out_tok_;
  std::vector<float> x_, xn_, q_, att_, kk_, vv_, g_, u_, hn_;
  std::vector<float> rope_cs_[2];
};

}  // namespace tf::families::gemma
