#pragma once
/// A one-stream convenience over gemma3_forward (tf-generate, tests): it owns a trivial page
/// table covering `context` positions and keeps the stream's position.
#include <families/gemma/gemma3_forward.hpp>
#include <tf/error.hpp>

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace tf::families::gemma {

/// One stream: feed prompt chunks or single tokens, read the last token's logits.
class generator {
 public:
  generator(gemma3_weights w, std::int32_t context, int threads = 1, std::int32_t page_tokens = 256,
            kv_dtype dtype = kv_dtype::f32)
      : fwd_(std::move(w), shape(context, page_tokens, dtype), threads), context_(context) {
    pages_.resize(static_cast<std::size_t>(fwd_.kv().num_pages));
    std::iota(pages_.begin(), pages_.end(), 0);
    logits_.resize(static_cast<std::size_t>(fwd_.vocab_size()));
  }

  /// Appends `tokens` to the stream; returns the logits [vocab] after the last one.
  std::span<float const> feed(std::span<std::int32_t const> tokens) {
    run(tokens, false);
    return logits_;
  }

  /// Appends `tokens`; returns logits [tokens.size(), vocab], one row per token.
  std::span<float const> feed_all(std::span<std::int32_t const> tokens) {
    run(tokens, true);
    return logits_;
  }

  std::int32_t position() const { return pos_; }
  std::int32_t context() const { return context_; }
  /// Forgets the stream (its KV is overwritten by the next feed).
  void reset() { pos_ = 0; }
  gemma3_forward& forward() { return fwd_; }

 private:
  static kv_shape shape(std::int32_t context, std::int32_t page_tokens, kv_dtype dtype) {
    if (context <= 0 || page_tokens <= 0)
      throw error("tf: gemma3 generator needs context > 0 and page_tokens > 0, got {} and {}",
                  context, page_tokens);
    return {(context + page_tokens - 1) / page_tokens, page_tokens, dtype};
  }

  void run(std::span<std::int32_t const> tokens, bool all) {
    if (static_cast<std::int64_t>(pos_) + static_cast<std::int64_t>(tokens.size()) > context_)
      throw error("tf: gemma3 generator: {} tokens at position {} pass the context of {}",
                  tokens.size(), pos_, context_);
    batch_row row{tokens, pos_, pages_, all};
    logits_.resize(
        static_cast<std::size_t>(gemma3_forward::logits_rows({&row, 1}) * fwd_.vocab_size()));
    fwd_.forward({&row, 1}, logits_.data());
    pos_ += static_cast<std::int32_t>(tokens.size());
  }

  gemma3_forward fwd_;
  std::int32_t context_;
  std::int32_t pos_ = 0;
  std::vector<std::int32_t> pages_;
  std::vector<float> logits_;
};

}  // namespace tf::families::gemma
