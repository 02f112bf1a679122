#pragma once
/// Attention of query rows over a paged KV cache (f32 or f16 K/V), GQA, sliding window, softcap.
/// Per (row, head): scores in key order, stable softmax, values summed in key order, all in f32;
/// the prefill call runs the very same routine per row, so it equals single-row calls bit for bit.
#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <tf/error.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace tf::kernels::cpu {

/// Element type of the K and V caches.
enum class kv_dtype { f32, f16 };

/// The cache and shape part shared by the single-row and prefill calls.
struct kv_cache_view {
  const void* k_cache = nullptr;  // [num_pages, page_tokens, n_kv_heads, head_dim]
  const void* v_cache = nullptr;  // [num_pages, page_tokens, n_kv_heads, head_dim]
  kv_dtype dtype = kv_dtype::f32;
  std::int64_t num_pages = 0;
  std::int64_t page_tokens = 0;
  const std::int32_t* page_table =
      nullptr;  // [n_pages_used] page ids, token t in page t / page_tokens
  std::int64_t n_pages_used = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
};

/// One query row: keys 0..n_tokens-1 are visible, minus those with q_pos - k_pos >= window.
struct attention_params {
  kv_cache_view kv;
  const float* q = nullptr;  // [n_heads, head_dim]
  float* out = nullptr;      // [n_heads, head_dim]
  std::int64_t n_tokens = 0;
  std::int64_t q_pos = 0;
  std::int64_t window = 0;  // 0: all keys
  float scale = 1.0f;
  float softcap = 0.0f;  // 0: none; else scores become softcap * tanh(score / softcap)
};

/// Several query rows at causal positions (prefill): row r sees keys 0..min(n_tokens,
/// q_pos[r]+1)-1.
struct attention_prefill_params {
  kv_cache_view kv;
  const float* q = nullptr;             // [n_rows, n_heads, head_dim]
  float* out = nullptr;                 // [n_rows, n_heads, head_dim]
  const std::int64_t* q_pos = nullptr;  // [n_rows]
  std::int64_t n_rows = 0;
  std::int64_t n_tokens = 0;
  std::int64_t window = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
};

namespace detail {

inline void check_kv(const kv_cache_view& kv, std::int64_t n_tokens) {
  if (!kv.k_cache || !kv.v_cache || !kv.page_table || kv.page_tokens <= 0 || kv.n_heads <= 0 ||
      kv.n_kv_heads <= 0 || kv.head_dim <= 0 || kv.n_heads % kv.n_kv_heads != 0)
    throw tf::error(
        "tf::kernels::cpu::attention: bad cache view (n_heads={}, n_kv_heads={}, "
        "head_dim={}, page_tokens={})",
        kv.n_heads, kv.n_kv_heads, kv.head_dim, kv.page_tokens);
  if (n_tokens < 0 || n_tokens > kv.n_pages_used * kv.page_tokens)
    throw tf::error("tf::kernels::cpu::attention: {} tokens do not fit {} pages of {}", n_tokens,
                    kv.n_pages_used, kv.page_tokens);
  const std::int64_t pages = (n_tokens + kv.page_tokens - 1) / kv.page_tokens;
  for (std::int64_t i = 0; i < pages; ++i)
    if (kv.page_table[i] < 0 || kv.page_table[i] >= kv.num_pages)
      throw tf::error("tf::kernels::cpu::attention: page_table[{}] = {} is not a page (0..{})", i,
                      kv.page_table[i], kv.num_pages - 1);
}

inline void load_row(const kv_cache_view& kv, const void* cache, std::int64_t t, std::int64_t kvh,
                     float* dst /* [head_dim] */) {
  const std::int64_t page = kv.page_table[t / kv.page_tokens];
  const std::int64_t at =
      ((page * kv.page_tokens + t % kv.page_tokens) * kv.n_kv_heads + kvh) * kv.head_dim;
  if (kv.dtype == kv_dtype::f32) {
    const float* s = static_cast<const float*>(cache) + at;
    for (std::int64_t d = 0; d < kv.head_dim; ++d) dst[d] = s[d];
  } else {
    const std::uint16_t* s = static_cast<const std::uint16_t*>(cache) + at;
    for (std::int64_t d = 0; d < kv.head_dim; ++d) dst[d] = fp16_to_fp32(s[d]);
  }
}

inline float dot_fixed(const float* a, const float* b, std::int64_t n) {
  float p[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) p[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) p[j] += a[i] * b[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

// One (row, head): the routine both entry points share.
inline void attend_head(const kv_cache_view& kv, const float* q /* [head_dim] */,
                        float* out /* [head_dim] */, std::int64_t head, std::int64_t n_visible,
                        std::int64_t q_pos, std::int64_t window, float scale, float softcap,
                        std::vector<float>& scores, std::vector<float>& row) {
  const std::int64_t kvh = head / (kv.n_heads / kv.n_kv_heads);
  const std::int64_t first = window > 0 && q_pos - window + 1 > 0 ? q_pos - window + 1 : 0;
  for (std::int64_t d = 0; d < kv.head_dim; ++d) out[d] = 0.0f;
  if (first >= n_visible) return;  // nothing visible: a zero row
  scores.resize(static_cast<std::size_t>(n_visible - first));
  row.resize(static_cast<std::size_t>(kv.head_dim));
  float m = -INFINITY;
  for (std::int64_t t = first; t < n_visible; ++t) {
    load_row(kv, kv.k_cache, t, kvh, row.data());
    float s = dot_fixed(q, row.data(), kv.head_dim) * scale;
    if (softcap > 0.0f) s = softcap * std::tanh(s / softcap);
    scores[static_cast<std::size_t>(t - first)] = s;
    m = std::fmax(m, s);
  }
  float sum = 0.0f;
  for (auto& s : scores) {
    s = std::exp(s - m);
    sum += s;
  }
  for (std::int64_t t = first; t < n_visible; ++t) {
    load_row(kv, kv.v_cache, t, kvh, row.data());
    const float pw = scores[static_cast<std::size_t>(t - first)];
    for (std::int64_t d = 0; d < kv.head_dim; ++d) out[d] += pw * row[static_cast<std::size_t>(d)];
  }
  const float inv = 1.0f / sum;
  for (std::int64_t d = 0; d < kv.head_dim; ++d) out[d] *= inv;
}

}  // namespace detail

/// Attention of one query row, heads split over `pool`.
inline void attention(const attention_params& p, thread_pool& pool) {
  detail::check_kv(p.kv, p.n_tokens);
  if (!p.q || !p.out) throw tf::error("tf::kernels::cpu::attention: null q or out");
  pool.parallel_for(p.kv.n_heads, [&](std::int64_t begin, std::int64_t end) {
    thread_local std::vector<float> scores, row;
    for (std::int64_t h = begin; h < end; ++h)
      detail::attend_head(p.kv, p.q + h * p.kv.head_dim, p.out + h * p.kv.head_dim, h, p.n_tokens,
                          p.q_pos, p.window, p.scale, p.softcap, scores, row);
  });
}

/// Attention of several causal query rows, (row, head) pairs split over `pool`.
inline void attention_prefill(const attention_prefill_params& p, thread_pool& pool) {
  detail::check_kv(p.kv, p.n_tokens);
  if (p.n_rows < 0 || (p.n_rows > 0 && (!p.q || !p.out || !p.q_pos)))
    throw tf::error("tf::kernels::cpu::attention_prefill: null q, out or q_pos ({} rows)",
                    p.n_rows);
  const std::int64_t nh = p.kv.n_heads, hd = p.kv.head_dim;
  pool.parallel_for(p.n_rows * nh, [&](std::int64_t begin, std::int64_t end) {
    thread_local std::vector<float> scores, row;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t r = i / nh, h = i % nh;
      const std::int64_t visible = p.q_pos[r] + 1 < p.n_tokens ? p.q_pos[r] + 1 : p.n_tokens;
      detail::attend_head(p.kv, p.q + (r * nh + h) * hd, p.out + (r * nh + h) * hd, h, visible,
                          p.q_pos[r], p.window, p.scale, p.softcap, scores, row);
    }
  });
}

}  // namespace tf::kernels::cpu
