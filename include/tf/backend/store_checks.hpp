#pragma once
/// What every backend checks the same way: a KV store's shape, a recurrent layer's float range
/// in a state slot, and how a batch's rows split its tokens.
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
}

/// Throws tf::error unless floats [offset, offset + floats) of recurrent layer `layer` lie in a
/// slot of `layout`.
inline void check_state_range(state_layout layout, int layer, std::int64_t offset,
                              std::int64_t floats) {
  if (layer < 0 || layer >= layout.layers || offset < 0 || offset + floats > layout.floats)
    throw error("tf: recurrent layer {} state floats {}..{} outside its {} x {}", layer, offset,
                offset + floats, layout.layers, layout.floats);
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
