#pragma once
/// The CPU backend's KV store: per-layer K and V in pages (f32 or f16), K/V writes at each token's
/// position, and causal attention over a row's pages. Each output element is summed in one fixed
/// order, so results do not depend on the batch or the thread count.
#include <kernels/cpu/attention_f16.hpp>
#include <kernels/cpu/kv_rows.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <kernels/cpu/vec_math.hpp>
#include <tf/backend/backend.hpp>
#include <tf/backend/cpu/zeroed_array.hpp>
#include <tf/backend/host_step.hpp>
#include <tf/backend/store_checks.hpp>
#include <tf/batch.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace tf::backend::cpu_parts {

/// K and V of attention layers of one shape in `shape.num_pages` pages of `shape.page_tokens`
/// positions.
class uniform_kv_store {
 public:
  uniform_kv_store() = default;
  uniform_kv_store(kv_shape shape, kv_layout layout) : kv_(shape), layout_(layout) {
    check_kv_store(shape, layout);
    page_floats_ = static_cast<std::size_t>(kv_.page_tokens) *
                   static_cast<std::size_t>(layout.kv_heads) *
                   static_cast<std::size_t>(layout.head_dim);
    std::size_t const per_layer = page_floats_ * static_cast<std::size_t>(kv_.num_pages);
    auto const n = static_cast<std::size_t>(layout.layers);
    // Zero pages the kernel maps on first write: unused pages cost no resident memory.
    for (std::size_t l = 0; l < n; ++l) {
      if (kv_.dtype == kv_dtype::f32) {
        k_.emplace_back(per_layer);
        v_.emplace_back(per_layer);
      } else {
        k16_.emplace_back(per_layer);
        v16_.emplace_back(per_layer);
      }
    }
  }

  kv_shape shape() const { return kv_; }
  kv_layout layout() const { return layout_; }

  /// Page `to` takes page `from`'s K and V in every layer.
  void copy_page(std::int32_t from, std::int32_t to) {
    if (from < 0 || to < 0 || from >= kv_.num_pages || to >= kv_.num_pages)
      throw error("tf: KV page copy {} -> {} outside the store's {} pages", from, to,
                  kv_.num_pages);
    if (from == to) return;
    auto copy = [&](auto& layers) {
      for (auto& l : layers)
        std::copy_n(l.data() + static_cast<std::size_t>(from) * page_floats_, page_floats_,
                    l.data() + static_cast<std::size_t>(to) * page_floats_);
    };
    copy(k_);
    copy(v_);
    copy(k16_);
    copy(v16_);
  }

  /// Stores token t's K and V (kv_heads x head_dim each) at its position in `layer`'s pages.
  void store(host_step const& s, int layer, std::int64_t t, float const* ks, float const* vs) {
    std::int64_t const kv_dim = static_cast<std::int64_t>(layout_.kv_heads) * layout_.head_dim;
    std::size_t const at = kv_at(s, t, s.position(t));
    auto const l = static_cast<std::size_t>(layer);
    if (kv_.dtype == kv_dtype::f32) {
      std::copy_n(ks, kv_dim, k_[l].data() + at);
      std::copy_n(vs, kv_dim, v_[l].data() + at);
    } else {
      kernels::cpu::kv_rows::to_f16(ks, k16_[l].data() + at, kv_dim);
      kernels::cpu::kv_rows::to_f16(vs, v16_[l].data() + at, kv_dim);
    }
  }

  /// Causal attention of the step's tokens over `layer`'s pages (see attention_params). q and out
  /// are [n, heads, head_dim]; query head h reads KV head h / (heads / kv_heads).
  void attend(kernels::cpu::thread_pool& pool, host_step const& s, int layer, float const* q,
              float* out, attention_params const& a) const {
    if (a.kv_heads != layout_.kv_heads || a.head_dim != layout_.head_dim || a.heads <= 0 ||
        a.heads % a.kv_heads != 0)
      throw error("tf: attention of {} heads over {} KV heads of {} against a store of {} x {}",
                  a.heads, a.kv_heads, a.head_dim, layout_.kv_heads, layout_.head_dim);
    float const scale =
        a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(layout_.head_dim));
    auto const l = static_cast<std::size_t>(layer);
    std::int64_t const n = s.tokens();
    if (kv_.dtype == kv_dtype::f32)
      attention(pool, s, n, a.heads, q, out, k_[l].data(), v_[l].data(), scale, a.window,
                a.softcap);
    else
      attention_f16(pool, s, n, a.heads, q, out, k16_[l].data(), v16_[l].data(), scale, a.window,
                    a.softcap);
  }

 private:
  // Element offset of position `pos` of token t's stream in one layer's storage.
  std::size_t kv_at(host_step const& s, std::int64_t t, std::int32_t pos) const {
    auto const& row = s.row_of(t);
    auto const page = row.page_table[static_cast<std::size_t>(pos / kv_.page_tokens)];
    std::size_t const offset = static_cast<std::size_t>(pos % kv_.page_tokens);
    return static_cast<std::size_t>(page) * page_floats_ +
           offset * static_cast<std::size_t>(layout_.kv_heads * layout_.head_dim);
  }

  static void cap_scores(float* s, std::int64_t n, float cap) {
    for (std::int64_t i = 0; i < n; ++i) s[i] = cap * std::tanh(s[i] / cap);
  }

  // f16 KV as llama.cpp's CPU path computes it, bit for bit while a stream's positions are its
  // cache cells: q and the probabilities rounded to f16, scores and outputs in its f16 dot order
  // (a key's place in the sums set by its position), its exp, its 8-key softmax chunks. A work
  // item is up to 8 consecutive tokens of one stream, each with G query heads of one KV head (G
  // as in attention), so each K and V row is converted once for the G and read from L1 by the
  // tile's tokens; every head's sums are the same for every G, tile and thread count.
  void attention_f16(kernels::cpu::thread_pool& pool, host_step const& s, std::int64_t n,
                     std::int64_t nh, float const* q, float* att, std::uint16_t const* K,
                     std::uint16_t const* V, float scale, std::int32_t window,
                     float softcap) const {
    by_head_group(pool.size(), n, nh, [&](auto g) {
      attention_f16_in<decltype(g)::value>(pool, s, n, nh, q, att, K, V, scale, window, softcap);
    });
  }

  // Work item w of a pass over G query heads at a time (per_kv items per KV head): its token, KV
  // head, first query head and the keys lo..p it sees.
  struct head_item {
    std::int64_t t, kvh, h0;
    std::int32_t lo, p;
  };
  head_item item_of(host_step const& s, std::int64_t w, int G, std::int64_t per_kv,
                    std::int32_t window) const {
    std::int64_t const t = w / (layout_.kv_heads * per_kv), kvh = w / per_kv % layout_.kv_heads;
    std::int32_t const p = s.position(t);
    std::int32_t const lo = window > 0 ? std::max(0, p - window + 1) : 0;
    return {t, kvh, kvh * (per_kv * G) + w % per_kv * G, lo, p};
  }

  // Calls run(integral_constant<int, G>) with the largest G of 4, 2, 1 that divides a KV head's
  // query heads and still gives each of `threads` an item (a token's G heads of one KV head).
  template <class Run>
  void by_head_group(int threads, std::int64_t n, std::int64_t nh, Run&& run) const {
    std::int64_t const group = nh / layout_.kv_heads;
    auto items = [&](std::int64_t g) { return n * layout_.kv_heads * (group / g); };
    if (group % 4 == 0 && items(4) >= threads) return run(std::integral_constant<int, 4>{});
    if (group % 2 == 0 && items(2) >= threads) return run(std::integral_constant<int, 2>{});
    run(std::integral_constant<int, 1>{});
  }

  template <int G>
  void attention_f16_in(kernels::cpu::thread_pool& pool, host_step const& s, std::int64_t n,
                        std::int64_t nh, float const* q, float* att, std::uint16_t const* K,
                        std::uint16_t const* V, float scale, std::int32_t window,
                        float softcap) const {
    namespace af = kernels::cpu::attention_f16;
    namespace rows = kernels::cpu::kv_rows;
    constexpr std::int32_t accs = af::key_accumulators;
    constexpr int KP = 8 / G;             // keys per score pass: G * KP sums in the registers
    constexpr std::int32_t block = 32;    // keys whose K rows a tile's tokens take from L1
    constexpr std::int64_t max_tile = 8;  // tokens of one stream per work item
    std::int64_t const hd = layout_.head_dim, q_dim = hd * nh, group = nh / layout_.kv_heads;
    std::int64_t const per_kv = group / G, per_tile = layout_.kv_heads * per_kv;
    auto const stride = static_cast<std::size_t>(layout_.kv_heads * hd);
    float const neg_inf = -std::numeric_limits<float>::infinity();
    // Tiles of consecutive tokens of one stream; single tokens unless every thread gets several.
    std::int64_t const tile = n >= 4 * max_tile * pool.size() ? max_tile : 1;
    std::vector<std::int64_t> starts;
    for (std::int64_t t = 0; t < n; ++t)
      if (t == 0 || t - starts.back() == tile || &s.row_of(t) != &s.row_of(t - 1))
        starts.push_back(t);
    starts.push_back(n);
    auto const tiles = static_cast<std::int64_t>(starts.size()) - 1;
    // Tiles from the front and the back in turn: a causal tile's keys grow with its position, so
    // each thread's contiguous share of items gets as many keys as the others.
    std::vector<std::int64_t> order;
    for (std::int64_t a = 0, b = tiles - 1; a <= b; ++a, --b) {
      order.push_back(a);
      if (a != b) order.push_back(b);
    }
    pool.parallel_for(tiles * per_tile, [&](std::int64_t w0, std::int64_t w1) {
      thread_local std::vector<float> scores, qs, probs;
      thread_local std::vector<std::uint16_t const*> krows, vrows;
      for (std::int64_t w = w0; w < w1; ++w) {
        auto const tl = static_cast<std::size_t>(order[static_cast<std::size_t>(w / per_tile)]);
        std::int64_t const kvh = w / per_kv % layout_.kv_heads;
        std::int64_t const h0 = kvh * (per_kv * G) + w % per_kv * G;
        std::int64_t const t0 = starts[tl], nt = starts[tl + 1] - t0;
        // Per token: keys lo..p, whole 32-key cycles a0.. (span keys) around them, where its
        // scores start; the keys outside lo..p get no weight.
        std::int32_t lo[max_tile], p[max_tile], a0[max_tile];
        std::int64_t span[max_tile], at[max_tile];
        std::int64_t total = 0;
        for (std::int64_t u = 0; u < nt; ++u) {
          p[u] = s.position(t0 + u);
          lo[u] = window > 0 ? std::max(0, p[u] - window + 1) : 0;
          a0[u] = lo[u] - lo[u] % accs;
          span[u] = (p[u] + accs) / accs * accs - a0[u];
          at[u] = total;
          total += G * span[u];
        }
        std::int32_t const LO = *std::min_element(lo, lo + nt), P = *std::max_element(p, p + nt);
        // K and V rows of LO..P (one stream, one page table), a page's rows one stride apart.
        auto const keys = static_cast<std::size_t>(P - LO + 1);
        krows.resize(keys);
        vrows.resize(keys);
        for (std::int32_t j = LO; j <= P;) {
          std::int32_t const end = std::min(P + 1, (j / kv_.page_tokens + 1) * kv_.page_tokens);
          std::size_t a = kv_at(s, t0, j) + static_cast<std::size_t>(kvh * hd);
          for (; j < end; ++j, a += stride) {
            krows[static_cast<std::size_t>(j - LO)] = K + a;
            vrows[static_cast<std::size_t>(j - LO)] = V + a;
          }
        }
        qs.resize(static_cast<std::size_t>(nt * G * hd));
        scores.resize(static_cast<std::size_t>(total));
        float const* qg[max_tile][G];
        float* sk[max_tile][G];  // token u's head g's score of key lo[u]
        for (std::int64_t u = 0; u < nt; ++u)
          for (int g = 0; g < G; ++g) {
            float* qd = qs.data() + (u * G + g) * hd;
            rows::scale_round(q + (t0 + u) * q_dim + (h0 + g) * hd, scale, qd, hd);
            qg[u][g] = qd;
            float* sg = scores.data() + at[u] + g * span[u];
            sk[u][g] = sg + (lo[u] - a0[u]);
            std::fill(sg, sk[u][g], neg_inf);
            std::fill(sk[u][g] + (p[u] - lo[u] + 1), sg + span[u], neg_inf);
          }
        // Scores a block of keys at a time for every token of the tile.
        for (std::int32_t jb = LO; jb <= P; jb += block) {
          std::int32_t const je = std::min(P, jb + block - 1);
          for (std::int32_t u = je + 1; u <= std::min(P, je + block); ++u)
            rows::prefetch_row(krows[static_cast<std::size_t>(u - LO)], hd);
          for (std::int64_t u = 0; u < nt; ++u) {
            std::int32_t const j0 = std::max(jb, lo[u]), j1 = std::min(je, p[u]);
            if (j0 <= j1)
              af::dot_keys<G, KP>(qg[u], krows.data() + (j0 - LO), j1 - j0 + 1, hd,
                                  sk[u][0] + (j0 - lo[u]), span[u]);
          }
        }
        // Per token: each head's f16-rounded probabilities of lo..p, then the G heads' values.
        for (std::int64_t u = 0; u < nt; ++u) {
          std::int64_t const m = p[u] - lo[u] + 1;
          probs.resize(static_cast<std::size_t>(G * m));
          float const* pg[G];
          float* og[G];
          for (int g = 0; g < G; ++g) {
            if (softcap > 0.0f) cap_scores(sk[u][g], m, softcap);
            float* sg = scores.data() + at[u] + g * span[u];
            float const mx = kernels::cpu::vec_math::max_of(sg, span[u]);
            auto const inv = static_cast<float>(1.0 / af::exp_chunks(sg, span[u], mx));
            rows::scale_round(sk[u][g], inv, probs.data() + g * m, m);
            pg[g] = probs.data() + g * m;
            og[g] = att + (t0 + u) * q_dim + (h0 + g) * hd;
          }
          af::weighted_sum_heads<G>(vrows.data() + (lo[u] - LO), pg, m, lo[u] % accs, hd, og);
        }
      }
    });
  }

  // T is float (f32 KV) or std::uint16_t (f16 KV, where q and the probabilities are rounded to
  // f16 as well, as llama.cpp's CPU path does). A work item is one token's G query heads of one
  // KV head, so each K and V row is read and converted once for the G; G is as large as still
  // gives every thread an item, and each score and output has the same bits for every G.
  template <class T>
  void attention(kernels::cpu::thread_pool& pool, host_step const& s, std::int64_t n,
                 std::int64_t nh, float const* q, float* att, T const* K, T const* V, float scale,
                 std::int32_t window, float softcap) const {
    by_head_group(pool.size(), n, nh, [&](auto g) {
      attention_in<decltype(g)::value>(pool, s, n, nh, q, att, K, V, scale, window, softcap);
    });
  }

  template <int G, class T>
  void attention_in(kernels::cpu::thread_pool& pool, host_step const& s, std::int64_t n,
                    std::int64_t nh, float const* q, float* att, T const* K, T const* V,
                    float scale, std::int32_t window, float softcap) const {
    namespace rows = kernels::cpu::kv_rows;
    // Keys per pass: G * KP sums (or weights) fit in the registers.
    constexpr int KP = G == 4 ? 2 : 4;
    constexpr std::int32_t ahead = 8;  // keys between a row's prefetch and its use
    std::int64_t const hd = layout_.head_dim;
    std::int64_t const q_dim = hd * nh, group = nh / layout_.kv_heads, per_kv = group / G;
    pool.parallel_for(n * layout_.kv_heads * per_kv, [&](std::int64_t w0, std::int64_t w1) {
      thread_local std::vector<float> scores, qs;
      qs.resize(static_cast<std::size_t>(G * hd));
      for (std::int64_t w = w0; w < w1; ++w) {
        auto const [t, kvh, h0, lo, p] = item_of(s, w, G, per_kv, window);
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
        auto row = [&](T const* base, std::int32_t j) { return base + kv_at(s, t, j) + kvh * hd; };
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
          if (softcap > 0.0f) cap_scores(sg, nk, softcap);
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
  kv_layout layout_;
  std::size_t page_floats_ = 0;
  // [num_pages, page_tokens, num_kv_heads, head_dim] per layer
  std::vector<zeroed_array<float>> k_, v_;
  std::vector<zeroed_array<std::uint16_t>> k16_, v16_;
};

/// K and V of every attention layer: one uniform store for a model whose layers share one shape,
/// else one per layer that holds KV (a KV-shared layer reads its source's).
class kv_store {
 public:
  kv_store() = default;
  kv_store(kv_shape shape, kv_layout layout) : kv_(shape), layout_(std::move(layout)) {
    check_kv_store(shape, layout_);
    if (layout_.per_layer.empty()) {
      stores_.emplace_back(shape, layout_);
      for (int l = 0; l < layout_.layers; ++l) at_.push_back({0, l});
      return;
    }
    for (int l = 0; l < layout_.layers; ++l) {
      auto const s = layout_.layer(l);
      if (s.shares >= 0) {
        at_.push_back(at_[static_cast<std::size_t>(s.shares)]);
        continue;
      }
      at_.push_back({static_cast<int>(stores_.size()), 0});
      stores_.emplace_back(shape, kv_layout{1, s.kv_heads, s.head_dim});
    }
  }

  kv_shape shape() const { return kv_; }
  kv_layout const& layout() const { return layout_; }

  /// Page `to` takes page `from`'s K and V in every layer.
  void copy_page(std::int32_t from, std::int32_t to) {
    for (auto& st : stores_) st.copy_page(from, to);
  }

  /// Stores token t's K and V at its position in `layer`'s pages (a shared layer holds none).
  void store(host_step const& s, int layer, std::int64_t t, float const* ks, float const* vs) {
    if (layout_.layer(checked(layer)).shares >= 0)
      throw error("tf: KV layer {} reads layer {}'s KV and holds none to write", layer,
                  layout_.layer(layer).shares);
    auto const a = at_[static_cast<std::size_t>(layer)];
    stores_[static_cast<std::size_t>(a.store)].store(s, a.layer, t, ks, vs);
  }

  /// Causal attention of the step's tokens over `layer`'s pages (its source's when shared).
  void attend(kernels::cpu::thread_pool& pool, host_step const& s, int layer, float const* q,
              float* out, attention_params const& a) const {
    auto const at = at_[static_cast<std::size_t>(checked(layer))];
    stores_[static_cast<std::size_t>(at.store)].attend(pool, s, at.layer, q, out, a);
  }

 private:
  struct place {
    int store, layer;
  };
  int checked(int layer) const {
    if (layer < 0 || layer >= layout_.layers)
      throw error("tf: attention layer {} outside the KV store's {}", layer, layout_.layers);
    return layer;
  }

  kv_shape kv_;
  kv_layout layout_;
  std::vector<uniform_kv_store> stores_;
  std::vector<place> at_;  // per layer: its store and its layer there
};

}  // namespace tf::backend::cpu_parts
