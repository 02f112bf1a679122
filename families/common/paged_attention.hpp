#pragma once
/// Paged KV storage for the CPU forwards: per-layer K and V in pages (f32 or f16), one batch of
/// rows laid out per token, K/V writes at each token's position, and causal attention over the
/// pages. Each output element is summed in one fixed order, so results do not depend on the
/// batch or the thread count.
#include <families/common/cpu_ops.hpp>
#include <families/common/forward_rows.hpp>
#include <kernels/cpu/attention_f16.hpp>
#include <kernels/cpu/kv_rows.hpp>
#include <kernels/cpu/vec_math.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

namespace tf::families {

/// One forward's KV pages and the batch it is running; `family` names the family in errors.
class paged_kv {
 public:
  paged_kv() = default;
  paged_kv(kv_shape kv, int layers, int kv_heads, int head_dim, char const* family)
      : kv_(kv), kv_heads_(kv_heads), head_dim_(head_dim), family_(family) {
    if (kv_.num_pages <= 0 || kv_.page_tokens <= 0)
      throw error("tf: {} KV storage needs pages > 0 and page_tokens > 0, got {} and {}", family_,
                  kv_.num_pages, kv_.page_tokens);
    page_floats_ = static_cast<std::size_t>(kv_.page_tokens) * static_cast<std::size_t>(kv_heads) *
                   static_cast<std::size_t>(head_dim);
    std::size_t const per_layer = page_floats_ * static_cast<std::size_t>(kv_.num_pages);
    auto const n = static_cast<std::size_t>(layers);
    if (kv_.dtype == kv_dtype::f32) {
      k_.assign(n, std::vector<float>(per_layer, 0.0f));
      v_.assign(n, std::vector<float>(per_layer, 0.0f));
    } else {
      k16_.assign(n, std::vector<std::uint16_t>(per_layer, 0));
      v16_.assign(n, std::vector<std::uint16_t>(per_layer, 0));
    }
  }

  kv_shape shape() const { return kv_; }

  /// How many logits rows a forward writes for `rows`.
  static std::int64_t logits_rows(std::span<batch_row const> rows) {
    std::int64_t n = 0;
    for (auto const& r : rows) n += r.all_logits ? static_cast<std::int64_t>(r.tokens.size()) : 1;
    return n;
  }

  /// Throws tf::error for an empty batch, an empty row, a negative start, a page table too short
  /// or pointing outside the pages, or a token outside 0..vocab-1.
  void check(std::span<batch_row const> rows, std::int64_t vocab) const {
    if (rows.empty()) throw error("tf: {} forward got an empty batch", family_);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto const& row = rows[r];
      if (row.tokens.empty()) throw error("tf: {} forward: batch row {} has no tokens", family_, r);
      if (row.start_pos < 0)
        throw error("tf: {} forward: batch row {} starts at position {}", family_, r,
                    row.start_pos);
      std::int64_t const end =
          static_cast<std::int64_t>(row.start_pos) + static_cast<std::int64_t>(row.tokens.size());
      std::int64_t const pages_needed = (end + kv_.page_tokens - 1) / kv_.page_tokens;
      if (static_cast<std::int64_t>(row.page_table.size()) < pages_needed)
        throw error(
            "tf: {} forward: batch row {} reaches position {} and needs {} pages of {} "
            "tokens, its page table has {}",
            family_, r, end - 1, pages_needed, kv_.page_tokens, row.page_table.size());
      for (std::int64_t p = 0; p < pages_needed; ++p) {
        auto id = row.page_table[static_cast<std::size_t>(p)];
        if (id < 0 || id >= kv_.num_pages)
          throw error("tf: {} forward: batch row {} page_table[{}] = {} is outside 0..{}", family_,
                      r, p, id, kv_.num_pages - 1);
      }
      for (std::size_t i = 0; i < row.tokens.size(); ++i)
        if (row.tokens[i] < 0 || row.tokens[i] >= vocab)
          throw error(
              "tf: {} forward: batch row {} token {} is {}, outside the vocabulary of "
              "{}",
              family_, r, i, row.tokens[i], vocab);
    }
  }

  /// Flattens the rows into per-token arrays; returns the token count.
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

  /// Token t's id and stream position in the gathered batch.
  std::int32_t token(std::int64_t t) const { return tok_[static_cast<std::size_t>(t)]; }
  std::int32_t position(std::int64_t t) const { return pos_[static_cast<std::size_t>(t)]; }

  /// x[t] = the embedding row of token t, for the n gathered tokens; x is [n, hidden].
  void embed(kernels::cpu::thread_pool& pool, cpu_ops::matrix const& embd, float* x, std::int64_t n,
             std::int64_t hidden) const {
    pool.parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) embd.dequantize_row(token(t), x + t * hidden);
    });
  }

  /// The logits [logits_rows(rows), vocab] of the tokens that want them: the final RMSNorm
  /// of x (into the scratch `xn`), then the head.
  void head(kernels::cpu::thread_pool& pool, std::vector<float> const& norm,
            cpu_ops::matrix const& output, float const* x, std::vector<float>& xn,
            std::int64_t hidden, float eps, float* logits) const {
    std::int64_t const m = static_cast<std::int64_t>(out_tok_.size());
    xn.resize(static_cast<std::size_t>(m * hidden));
    for (std::int64_t i = 0; i < m; ++i)
      cpu_ops::rmsnorm(x + out_tok_[static_cast<std::size_t>(i)] * hidden, norm.data(),
                       xn.data() + i * hidden, hidden, eps);
    cpu_ops::matmul(pool, output, xn.data(), logits, m);
  }

  /// Stores token t's K and V (kv_heads x head_dim each) at its position in `layer`'s pages.
  void store(int layer, std::int64_t t, float const* ks, float const* vs) {
    std::int64_t const kv_dim = static_cast<std::int64_t>(kv_heads_) * head_dim_;
    std::size_t const at = kv_at(static_cast<std::size_t>(t), position(t));
    if (kv_.dtype == kv_dtype::f32) {
      std::copy_n(ks, kv_dim, k_[static_cast<std::size_t>(layer)].data() + at);
      std::copy_n(vs, kv_dim, v_[static_cast<std::size_t>(layer)].data() + at);
    } else {
      kernels::cpu::kv_rows::to_f16(ks, k16_[static_cast<std::size_t>(layer)].data() + at, kv_dim);
      kernels::cpu::kv_rows::to_f16(vs, v16_[static_cast<std::size_t>(layer)].data() + at, kv_dim);
    }
  }

  /// Causal attention of the n gathered tokens over `layer`'s pages, softmax(q k * scale) v, with
  /// scale 1 / sqrt(head_dim) unless given; with window > 0 a query at p sees keys p - window + 1
  /// .. p only. q and out are [n, num_heads, head_dim]; query head h reads KV head
  /// h / (num_heads / kv_heads).
  void attend(kernels::cpu::thread_pool& pool, int layer, std::int64_t n, std::int64_t num_heads,
              float const* q, float* out, float scale = 0.0f, std::int32_t window = 0) const {
    if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
    auto const l = static_cast<std::size_t>(layer);
    if (kv_.dtype == kv_dtype::f32)
      attention(pool, n, num_heads, q, out, k_[l].data(), v_[l].data(), scale, window);
    else
      attention_f16(pool, n, num_heads, q, out, k16_[l].data(), v16_[l].data(), scale, window);
  }

 private:
  // Element offset of position `pos` of token t's stream in one layer's storage.
  std::size_t kv_at(std::size_t t, std::int32_t pos) const {
    auto const& row = rows_[static_cast<std::size_t>(row_of_[t])];
    auto const page = row.page_table[static_cast<std::size_t>(pos / kv_.page_tokens)];
    std::size_t const slot = static_cast<std::size_t>(pos % kv_.page_tokens);
    return static_cast<std::size_t>(page) * page_floats_ +
           slot * static_cast<std::size_t>(kv_heads_ * head_dim_);
  }

  // f16 KV as llama.cpp's CPU path computes it, bit for bit while a stream's positions are its
  // cache cells: q and the probabilities rounded to f16, scores and outputs in its f16 dot order
  // (a key's place in the sums set by its position), its exp, its 8-key softmax chunks. A work
  // item is one token's G query heads of one KV head (G as in attention), so each K row is
  // converted once for the G; every head's sums are the same for every G.
  void attention_f16(kernels::cpu::thread_pool& pool, std::int64_t n, std::int64_t nh,
                     float const* q, float* att, std::uint16_t const* K, std::uint16_t const* V,
                     float scale, std::int32_t window) const {
    by_head_group(pool.size(), n, nh, [&](auto g) {
      attention_f16_in<decltype(g)::value>(pool, n, nh, q, att, K, V, scale, window);
    });
  }

  // Work item w of a pass over G query heads at a time (per_kv items per KV head): its token, KV
  // head, first query head and the keys lo..p it sees.
  struct head_item {
    std::int64_t t, kvh, h0;
    std::int32_t lo, p;
  };
  head_item item_of(std::int64_t w, int G, std::int64_t per_kv, std::int32_t window) const {
    std::int64_t const t = w / (kv_heads_ * per_kv), kvh = w / per_kv % kv_heads_;
    std::int32_t const p = pos_[static_cast<std::size_t>(t)];
    std::int32_t const lo = window > 0 ? std::max(0, p - window + 1) : 0;
    return {t, kvh, kvh * (per_kv * G) + w % per_kv * G, lo, p};
  }

  // Calls run(integral_constant<int, G>) with the largest G of 4, 2, 1 that divides a KV head's
  // query heads and still gives each of `threads` an item (a token's G heads of one KV head).
  template <class Run>
  void by_head_group(int threads, std::int64_t n, std::int64_t nh, Run&& run) const {
    std::int64_t const group = nh / kv_heads_;
    auto items = [&](std::int64_t g) { return n * kv_heads_ * (group / g); };
    if (group % 4 == 0 && items(4) >= threads) return run(std::integral_constant<int, 4>{});
    if (group % 2 == 0 && items(2) >= threads) return run(std::integral_constant<int, 2>{});
    run(std::integral_constant<int, 1>{});
  }

  template <int G>
  void attention_f16_in(kernels::cpu::thread_pool& pool, std::int64_t n, std::int64_t nh,
                        float const* q, float* att, std::uint16_t const* K, std::uint16_t const* V,
                        float scale, std::int32_t window) const {
    namespace af = kernels::cpu::attention_f16;
    namespace rows = kernels::cpu::kv_rows;
    constexpr std::int32_t slots = af::key_slots;
    constexpr std::int32_t ahead = 8;  // keys between a row's prefetch and its use
    std::int64_t const hd = head_dim_, q_dim = hd * nh, group = nh / kv_heads_;
    std::int64_t const per_kv = group / G;
    pool.parallel_for(n * kv_heads_ * per_kv, [&](std::int64_t w0, std::int64_t w1) {
      thread_local std::vector<float> scores, qs, probs;
      thread_local std::vector<std::uint16_t const*> vrows;
      qs.resize(static_cast<std::size_t>(G * hd));
      for (std::int64_t w = w0; w < w1; ++w) {
        auto const [t, kvh, h0, lo, p] = item_of(w, G, per_kv, window);
        // Whole 32-key cycles around lo..p; the keys outside get no weight.
        std::int32_t const a0 = lo - lo % slots, a1 = (p + slots) / slots * slots;
        std::int64_t const span = a1 - a0;
        auto row = [&](std::uint16_t const* base, std::int32_t j) {
          return base + kv_at(static_cast<std::size_t>(t), j) + kvh * hd;
        };
        float const* qg[G];
        for (int g = 0; g < G; ++g) {
          rows::scale_round(q + t * q_dim + (h0 + g) * hd, scale, qs.data() + g * hd, hd);
          qg[g] = qs.data() + g * hd;
        }
        scores.assign(static_cast<std::size_t>(G * span), -std::numeric_limits<float>::infinity());
        float sc[G];
        for (std::int32_t j = lo; j <= p; ++j) {
          if (j + ahead <= p) rows::prefetch_row(row(K, j + ahead), hd);
          af::dot_heads<G>(qg, row(K, j), hd, sc);
          for (int g = 0; g < G; ++g) scores[static_cast<std::size_t>(g * span + j - a0)] = sc[g];
        }
        float inv[G];
        for (int g = 0; g < G; ++g) {
          float* sg = scores.data() + g * span;
          float const mx = kernels::cpu::vec_math::max_of(sg, span);
          inv[g] = static_cast<float>(1.0 / af::exp_chunks(sg, span, mx));
        }
        // Values per head from the row pointers and f16-rounded probabilities of lo..p.
        std::int64_t const m = p - lo + 1;
        vrows.resize(static_cast<std::size_t>(m));
        probs.resize(static_cast<std::size_t>(m));
        for (std::int32_t j = lo; j <= p; ++j) vrows[static_cast<std::size_t>(j - lo)] = row(V, j);
        for (int g = 0; g < G; ++g) {
          float const* sg = scores.data() + g * span + (lo - a0);
          rows::scale_round(sg, inv[g], probs.data(), m);
          af::weighted_sum(vrows.data(), probs.data(), m, lo % slots, hd,
                           att + t * q_dim + (h0 + g) * hd);
        }
      }
    });
  }

  // T is float (f32 KV) or std::uint16_t (f16 KV, where q and the probabilities are rounded to
  // f16 as well, as llama.cpp's CPU path does). A work item is one token's G query heads of one
  // KV head, so each K and V row is read and converted once for the G; G is as large as still
  // gives every thread an item, and each score and output has the same bits for every G.
  template <class T>
  void attention(kernels::cpu::thread_pool& pool, std::int64_t n, std::int64_t nh, float const* q,
                 float* att, T const* K, T const* V, float scale, std::int32_t window) const {
    by_head_group(pool.size(), n, nh, [&](auto g) {
      attention_in<decltype(g)::value>(pool, n, nh, q, att, K, V, scale, window);
    });
  }

  template <int G, class T>
  void attention_in(kernels::cpu::thread_pool& pool, std::int64_t n, std::int64_t nh,
                    float const* q, float* att, T const* K, T const* V, float scale,
                    std::int32_t window) const {
    namespace rows = kernels::cpu::kv_rows;
    // Keys per pass: G * KP sums (or weights) fit in the registers.
    constexpr int KP = G == 4 ? 2 : 4;
    constexpr std::int32_t ahead = 8;  // keys between a row's prefetch and its use
    std::int64_t const hd = head_dim_;
    std::int64_t const q_dim = hd * nh, group = nh / kv_heads_, per_kv = group / G;
    pool.parallel_for(n * kv_heads_ * per_kv, [&](std::int64_t w0, std::int64_t w1) {
      thread_local std::vector<float> scores, qs;
      qs.resize(static_cast<std::size_t>(G * hd));
      for (std::int64_t w = w0; w < w1; ++w) {
        auto const [t, kvh, h0, lo, p] = item_of(w, G, per_kv, window);
        std::int64_t const nk = p - lo + 1;
        float const* qg[G];
        float* out[G];
        for (int g = 0; g < G; ++g) {
          float const* qh = q + t * q_dim + (h0 + g) * hd;
          float* qd = qs.data() + g * hd;
          if constexpr (std::is_same_v<T, float>) {
            for (std::int64_t d = 0; d < hd; ++d) qd[d] = qh[d] * scale;
          } else {
            rows::scale_round(qh, scale, qd, hd);
          }
          qg[g] = qd;
          out[g] = att + t * q_dim + (h0 + g) * hd;
        }
        scores.resize(static_cast<std::size_t>(G * nk));
        auto row = [&](T const* base, std::int32_t j) {
          return base + kv_at(static_cast<std::size_t>(t), j) + kvh * hd;
        };
        // Scores [G, nk]: KP keys at a time against the G heads.
        float s[G * KP];
        std::int32_t j = lo;
        for (; j + KP <= p + 1; j += KP) {
          for (std::int32_t u = j + ahead; u < j + ahead + KP && u <= p; ++u)
            rows::prefetch_row(row(K, u), hd);
          T const* kj[KP];
          for (int k = 0; k < KP; ++k) kj[k] = row(K, j + k);
          rows::dot_heads<G, KP>(qg, kj, hd, s);
          for (int g = 0; g < G; ++g)
            for (int k = 0; k < KP; ++k)
              scores[static_cast<std::size_t>(g * nk + j - lo + k)] = s[g * KP + k];
        }
        for (; j <= p; ++j) {
          T const* kj[1] = {row(K, j)};
          rows::dot_heads<G, 1>(qg, kj, hd, s);
          for (int g = 0; g < G; ++g) scores[static_cast<std::size_t>(g * nk + j - lo)] = s[g];
        }
        // Softmax per head; then the probabilities, rounded to f16 with an f16 cache.
        for (int g = 0; g < G; ++g) {
          float* sg = scores.data() + g * nk;
          float const mx = kernels::cpu::vec_math::max_of(sg, nk);
          double z = 0.0;
          for (std::int64_t i = 0; i < nk; ++i) {
            sg[i] = std::exp(sg[i] - mx);
            z += sg[i];
          }
          float const inv = static_cast<float>(1.0 / z);
          if constexpr (std::is_same_v<T, float>) {
            for (std::int64_t i = 0; i < nk; ++i) sg[i] *= inv;
          } else {
            rows::scale_round(sg, inv, sg, nk);
          }
          std::fill_n(out[g], hd, 0.0f);
        }
        // out[g] += p[g][j] v[j] for j in order, KP values at a time.
        float a[G * KP];
        for (j = lo; j + KP <= p + 1; j += KP) {
          for (std::int32_t u = j + ahead; u < j + ahead + KP && u <= p; ++u)
            rows::prefetch_row(row(V, u), hd);
          T const* vj[KP];
          for (int k = 0; k < KP; ++k) vj[k] = row(V, j + k);
          for (int g = 0; g < G; ++g)
            for (int k = 0; k < KP; ++k)
              a[g * KP + k] = scores[static_cast<std::size_t>(g * nk + j - lo + k)];
          rows::axpy_heads<G, KP>(a, vj, out, hd);
        }
        for (; j <= p; ++j) {
          T const* vj[1] = {row(V, j)};
          for (int g = 0; g < G; ++g) a[g] = scores[static_cast<std::size_t>(g * nk + j - lo)];
          rows::axpy_heads<G, 1>(a, vj, out, hd);
        }
      }
    });
  }

  kv_shape kv_;
  int kv_heads_ = 0, head_dim_ = 0;
  char const* family_ = "";
  std::size_t page_floats_ = 0;
  // [num_pages, page_tokens, num_kv_heads, head_dim] per layer
  std::vector<std::vector<float>> k_, v_;
  std::vector<std::vector<std::uint16_t>> k16_, v16_;
  std::vector<batch_row> rows_;
  std::vector<std::int32_t> tok_, pos_, row_of_;
  std::vector<std::int64_t> out_tok_;
};

}  // namespace tf::families
