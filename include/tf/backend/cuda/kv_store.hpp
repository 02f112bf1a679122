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
#include <vector>

namespace tf::backend::cuda_parts {

class kv_store {
 public:
  kv_store() = default;
  kv_store(kv_shape shape, kv_layout layout) : kv_(shape), layout_(layout) {
    check_kv_store(shape, layout);
    std::size_t const bytes = static_cast<std::size_t>(kv_.num_pages) * page_elems() * elem_bytes();
    for (int l = 0; l < layout.layers; ++l) {
      k_.emplace_back().resize(bytes);
      v_.emplace_back().resize(bytes);
    }
  }

  kv_shape shape() const { return kv_; }
  kv_layout layout() const { return layout_; }

  /// What the kernels read of attention layer `layer`.
  kernels::cuda::kv_layer layer(int layer) const {
    if (layer < 0 || layer >= layout_.layers)
      throw error("tf: attention layer {} outside the KV store's {}", layer, layout_.layers);
    auto const l = static_cast<std::size_t>(layer);
    return {const_cast<std::byte*>(k_[l].data()),
            const_cast<std::byte*>(v_[l].data()),
            kv_.dtype == kv_dtype::f16,
            kv_.page_tokens,
            layout_.kv_heads,
            layout_.head_dim};
  }

  /// Page `to` takes page `from`'s K and V in every layer.
  void copy_page(std::int32_t from, std::int32_t to) {
    if (from < 0 || to < 0 || from >= kv_.num_pages || to >= kv_.num_pages)
      throw error("tf: KV page copy {} -> {} outside the store's {} pages", from, to,
                  kv_.num_pages);
    if (from == to) return;
    for (int l = 0; l < layout_.layers; ++l)
      kernels::cuda::kv_copy_page(layer(l), from, to, nullptr);
  }

 private:
  std::size_t page_elems() const {
    return static_cast<std::size_t>(kv_.page_tokens) * static_cast<std::size_t>(layout_.kv_heads) *
           static_cast<std::size_t>(layout_.head_dim);
  }
  std::size_t elem_bytes() const { return kv_.dtype == kv_dtype::f32 ? 4 : 2; }

  kv_shape kv_;
  kv_layout layout_;
  std::vector<device_array<std::byte>> k_, v_;
};

}  // namespace tf::backend::cuda_parts
