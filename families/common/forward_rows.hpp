#pragma once
/// What every family's CPU forward takes: batch rows over paged KV storage, and its shape.
#include <cstdint>
#include <span>

namespace tf::families {

/// One stream's share of a forward: a prompt chunk or one decode token at `start_pos`.
struct batch_row {
  std::span<std::int32_t const> tokens;
  std::int32_t start_pos = 0;
  std::span<std::int32_t const> page_table;  // page ids for positions 0, page_tokens, ...
  bool all_logits = false;                   // logits for every token, not only the last
};

/// Element type of the KV storage: f32, or f16 (half the memory; q and the attention
/// probabilities are rounded to f16 for the dot products, as llama.cpp's CPU path does).
enum class kv_dtype { f32, f16 };

/// Size of the KV storage: num_pages pages of page_tokens positions, for every layer.
struct kv_shape {
  std::int32_t num_pages = 0;
  std::int32_t page_tokens = 0;
  kv_dtype dtype = kv_dtype::f32;
};

}  // namespace tf::families
