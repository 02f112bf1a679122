#pragma once
/// What every backend checks the same way: a KV store's shape, a recurrent layer's float range
/// in a state slot, the shapes of the column and recurrent operations, and how a batch's rows
/// split its tokens.
#include <tf/backend/backend.hpp>
#include <tf/batch.hpp>
#include <tf/error.hpp>

#include <cstdint>
#include <utility>

namespace tf::backend {

/// Throws tf::error unless `shape` and `layout` describe a KV store that can be allocated.
inline void check_kv_store(kv_shape shape, kv_layout layout) {
  if (shape.num_pages <= 0 || shape.page_tokens <= 0)
    throw error("tf: KV storage needs pages > 0 and page_tokens > 0, got {} and {}",
                shape.num_pages, shape.page_tokens);
  if (layout.layers < 0 || layout.kv_heads <= 0 || layout.head_dim <= 0)
    throw error("tf: KV storage for {} layers of {} heads of {}", layout.layers, layout.kv_heads,
                layout.head_dim);
  if (!layout.per_layer.empty() &&
      layout.per_layer.size() != static_cast<std::size_t>(layout.layers))
    throw error("tf: a KV layout of {} layers lists {} layer shapes", layout.layers,
                layout.per_layer.size());
  for (int l = 0; l < layout.layers; ++l) {
    auto const s = layout.layer(l);
    // A shared layer reads an earlier layer that holds its own KV.
    if (s.shares >= 0 ? s.shares >= l || layout.layer(s.shares).shares >= 0
                      : s.kv_heads <= 0 || s.head_dim <= 0)
      throw error("tf: KV layer {} of {} heads of {} sharing layer {}", l, s.kv_heads, s.head_dim,
                  s.shares);
  }
}

/// Throws tf::error unless floats [offset, offset + floats) of recurrent layer `layer` lie in a
/// slot of `layout`.
inline void check_state_range(state_layout layout, int layer, std::int64_t offset,
                              std::int64_t floats) {
  if (layer < 0 || layer >= layout.layers || offset < 0 || offset + floats > layout.floats)
    throw error("tf: recurrent layer {} state floats {}..{} outside its {} x {}", layer, offset,
                offset + floats, layout.layers, layout.floats);
}

/// The period of a columns() slice [first, first + count) of src_cols columns (period 0: the
/// whole row); throws tf::error unless the slice fits every period.
inline std::int64_t column_period(std::int64_t src_cols, std::int64_t first, std::int64_t count,
                                  std::int64_t period) {
  std::int64_t const per = period > 0 ? period : src_cols;
  if (per <= 0 || src_cols % per != 0 || first < 0 || count < 0 || first + count > per)
    throw error("tf: columns {}..{} of period {} from a buffer of {} columns", first, first + count,
                per, src_cols);
  return per;
}

/// Throws tf::error unless a gated norm over groups of `group` of `cols` columns has `weights`
/// weights (cols or group) and a gate of the same shape.
inline void check_gated_norm(std::int64_t cols, int group, std::int64_t weights, bool gate_fits) {
  if (group <= 0 || cols % group != 0 || (weights != cols && weights != group) || !gate_fits)
    throw error("tf: a gated norm of groups of {} with {} weights over {} columns", group, weights,
                cols);
}

/// The kernel width of a conv1d of `weights` weights over `channels` (bias_size: -1 without a
/// bias); throws tf::error unless it is 1..16 taps per channel with a bias per channel.
inline std::int64_t conv1d_taps(std::int64_t channels, std::int64_t weights,
                                std::int64_t bias_size) {
  auto const taps = channels > 0 ? weights / channels : 0;
  if (channels <= 0 || taps < 1 || taps > 16 || taps * channels != weights ||
      (bias_size >= 0 && bias_size != channels))
    throw error("tf: a conv1d of {} weights over {} channels", weights, channels);
  return taps;
}

/// Throws tf::error unless an SSM scan of `p` reads xbc of `xbc_cols`, dt of `dt_cols` and
/// per-head vectors of `dt_bias`, `a`, `d` values.
inline void check_ssm_scan(ssm_params const& p, std::int64_t xbc_cols, std::int64_t dt_cols,
                           std::int64_t dt_bias, std::int64_t a, std::int64_t d) {
  std::int64_t const nh = p.heads;
  if (nh <= 0 || p.groups <= 0 || nh % p.groups != 0 ||
      xbc_cols != nh * p.head_dim + 2 * std::int64_t{p.groups} * p.state_size || dt_cols != nh ||
      dt_bias != nh || a != nh || d != nh)
    throw error("tf: an SSM scan of {} heads x {} over {} columns", nh, p.head_dim, xbc_cols);
}

/// Throws tf::error unless a gated delta rule of `p` (k_dim, v_dim at most 256) reads qkv of
/// `qkv_cols`, b and a of `b_cols` / `a_cols` and per-head vectors of `dt_bias`, `a_coef` values.
inline void check_gated_delta(delta_params const& p, std::int64_t qkv_cols, std::int64_t b_cols,
                              std::int64_t a_cols, std::int64_t dt_bias, std::int64_t a_coef) {
  std::int64_t const nk = p.k_heads, nv = p.v_heads, dk = p.k_dim, dv = p.v_dim;
  if (nk <= 0 || nv % nk != 0 || dk > 256 || dv > 256 || qkv_cols != 2 * nk * dk + nv * dv ||
      b_cols != nv || a_cols != nv || dt_bias != nv || a_coef != nv)
    throw error("tf: a gated delta rule of {} k-heads x {}, {} v-heads x {} over {} columns", nk,
                dk, nv, dv, qkv_cols);
}

/// fn(row, its first token in the batch, its tokens) for each row of step `s`, in order.
template <class Step, class Fn>
void for_each_row(Step const& s, Fn&& fn) {
  std::int64_t first = 0;
  for (auto const& r : s.rows()) {
    auto const n = static_cast<std::int64_t>(r.tokens.size());
    fn(r, first, n);
    first += n;
  }
}

}  // namespace tf::backend
