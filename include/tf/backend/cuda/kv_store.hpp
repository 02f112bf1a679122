#pragma once
/// The CUDA backend's KV store: per-layer K and V pages (f16 or f32) in device memory, laid out
/// [num_pages][page_tokens][kv_heads][head_dim] as kernels/cuda/launch.hpp's kv_layer reads them.
#include <kernels/cuda/launch.hpp>
#include <tf/backend/backend.hpp>
#include <tf/backend/cuda/device.hpp>
#include <tf/backend/store_checks.hpp>
#include <tf/batch.hpp>
#include <tf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tf::backend::cuda_parts {

class kv_store {
 public:
  kv_store() = default;
  kv_store(kv_shape shape, kv_layout layout) : kv_(shape), layout_(std::move(layout)) {
    check_kv_store(shape, layout_);
    for (int l = 0; l < layout_.layers; ++l) {
      auto const s = layout_.layer(l);
      // A KV-shared layer allocates nothing: layer() hands out its source's pages.
      std::size_t const bytes =
          s.shares >= 0 ? 0
                        : static_cast<std::size_t>(kv_.num_pages) * page_elems(s) * elem_bytes();
      k_.emplace_back().resize(bytes);
      v_.emplace_back().resize(bytes);
    }
  }

  kv_shape shape() const { return kv_; }
  kv_layout const& layout() const { return layout_; }

  /// What the kernels read of attention layer `layer` (its source's pages when it shares them).
  kernels::cuda::kv_layer layer(int layer) const {
    if (layer < 0 || layer >= layout_.layers)
      throw error("tf: attention layer {} outside the KV store's {}", layer, layout_.layers);
    auto const s = layout_.layer(layer);
    auto const l = static_cast<std::size_t>(s.shares >= 0 ? s.shares : layer);
    auto const own = layout_.layer(static_cast<int>(l));
    return {const_cast<std::byte*>(k_[l].data()),
            const_cast<std::byte*>(v_[l].data()),
            kv_.dtype == kv_dtype::f16,
            kv_.page_tokens,
            own.kv_heads,
            own.head_dim};
  }

  /// Page `to` takes page `from`'s K and V in every layer.
  void copy_page(std::int32_t from, std::int32_t to) {
    if (from < 0 || to < 0 || from >= kv_.num_pages || to >= kv_.num_pages)
      throw error("tf: KV page copy {} -> {} outside the store's {} pages", from, to,
                  kv_.num_pages);
    if (from == to) return;
    for (int l = 0; l < layout_.layers; ++l)
      if (layout_.layer(l).shares < 0) kernels::cuda::kv_copy_page(layer(l), from, to, nullptr);
  }

 private:
  std::size_t page_elems(kv_layer_shape s) const {
    return static_cast<std::size_t>(kv_.page_tokens) * static_cast<std::size_t>(s.kv_heads) *
           static_cast<std::size_t>(s.head_dim);
  }
  std::size_t elem_bytes() const { return kv_.dtype == kv_dtype::f32 ? 4 : 2; }

  kv_shape kv_;
  kv_layout layout_;
  std::vector<device_array<std::byte>> k_, v_;
};

}  // namespace tf::backend::cuda_parts
