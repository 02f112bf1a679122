#pragma once
/// What one forward step runs: batch rows of several streams over paged KV storage (and, for a
/// family with recurrent layers, each stream's state slot). One type for the engine, the lane
/// host, tf-generate and the tests.
#include <cstdint>
#include <span>

namespace tf {

/// One stream's share of a forward: a prompt chunk or one decode token at `start_pos`.
struct batch_row {
  std::span<std::int32_t const> tokens;
  std::int32_t start_pos = 0;
  std::span<std::int32_t const> page_table;  // page ids for positions 0, page_tokens, ...
  bool all_logits = false;                   // logits for every token, not only the last
  std::int32_t state_slot = -1;              // the stream's recurrent-state slot; -1: none
};

/// How many logits rows a forward writes for `rows`: one per row, or one per token of a row
/// that asks for all.
inline std::int64_t logits_rows(std::span<batch_row const> rows) {
  std::int64_t n = 0;
  for (auto const& r : rows) n += r.all_logits ? static_cast<std::int64_t>(r.tokens.size()) : 1;
  return n;
}

/// Element type of the KV storage: f32, or f16 (half the memory; on the CPU q and the attention
/// probabilities are rounded to f16 for the dot products, as llama.cpp's CPU path does).
enum class kv_dtype { f32, f16 };

/// Size of an engine's stores: num_pages KV pages of page_tokens positions for every attention
/// layer, and num_state_slots recurrent-state slots (0 for a family without recurrent layers).
struct kv_shape {
  std::int32_t num_pages = 0;
  std::int32_t page_tokens = 0;
  kv_dtype dtype = kv_dtype::f32;
  std::int32_t num_state_slots = 0;
};

}  // namespace tf
