#pragma once
/// One stream over an engine (tf-generate, generate(), tests): a page table covering the stream's
/// window in the engine's KV store, and the stream's position.
#include <tf/batch.hpp>
#include <tf/error.hpp>

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace tf {

/// The KV shape one stream of `context` positions needs.
inline kv_shape one_stream_shape(std::int32_t context, std::int32_t page_tokens, kv_dtype dtype) {
  if (context <= 0 || page_tokens <= 0)
    throw error("tf: a stream needs context > 0 and page_tokens > 0, got {} and {}", context,
                page_tokens);
  return {(context + page_tokens - 1) / page_tokens, page_tokens, dtype, 1};
}

/// Feed prompt chunks or single tokens, read the logits. `Engine` is anything with forward(rows,
/// logits), vocab_size() and kv(); the stream uses all of its pages and its state slot 0.
template <class Engine>
class stream {
 public:
  explicit stream(Engine& e) : e_(&e) {
    auto const kv = e.kv();
    pages_.resize(static_cast<std::size_t>(kv.num_pages));
    std::iota(pages_.begin(), pages_.end(), 0);
    context_ = kv.num_pages * kv.page_tokens;
  }

  /// Appends `tokens`; returns the logits [vocab] after the last one, or with `all` [tokens.size(),
  /// vocab], one row per token.
  std::span<float const> feed(std::span<std::int32_t const> tokens, bool all = false) {
    if (static_cast<std::int64_t>(pos_) + static_cast<std::int64_t>(tokens.size()) > context_)
      throw error("tf: {} tokens at position {} pass the stream's context of {}", tokens.size(),
                  pos_, context_);
    batch_row row{tokens, pos_, pages_, all, e_->kv().num_state_slots > 0 ? 0 : -1};
    logits_.resize(static_cast<std::size_t>(logits_rows({&row, 1}) * e_->vocab_size()));
    e_->forward({&row, 1}, logits_.data());
    pos_ += static_cast<std::int32_t>(tokens.size());
    return logits_;
  }
  std::span<float const> feed_all(std::span<std::int32_t const> tokens) {
    return feed(tokens, true);
  }

  std::int32_t position() const { return pos_; }
  std::int32_t context() const { return context_; }
  /// Forgets the stream: the next feed starts at position 0 (its KV is overwritten).
  void reset() { pos_ = 0; }

 private:
  Engine* e_;
  std::int32_t context_ = 0;
  std::int32_t pos_ = 0;
  std::vector<std::int32_t> pages_;
  std::vector<float> logits_;
};

}  // namespace tf
