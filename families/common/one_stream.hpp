#pragma once
/// One stream over any family's CPU forward (tf-generate): a trivial page table covering
/// `context` positions, and the stream's position.
#include <families/common/cpu_entry.hpp>
#include <tf/error.hpp>

#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

namespace tf::families {

/// The KV shape one stream of `context` positions needs.
inline kv_shape one_stream_shape(std::int32_t context, std::int32_t page_tokens, kv_dtype dtype) {
  if (context <= 0 || page_tokens <= 0)
    throw error("tf: a stream needs context > 0 and page_tokens > 0, got {} and {}", context,
                page_tokens);
  return {(context + page_tokens - 1) / page_tokens, page_tokens, dtype};
}

/// Feed prompt chunks or single tokens, read the last token's logits.
template <cpu_forward Forward>
class one_stream {
 public:
  one_stream(std::unique_ptr<Forward> fwd, kv_shape kv, std::int32_t context)
      : fwd_(std::move(fwd)), context_(context) {
    pages_.resize(static_cast<std::size_t>(kv.num_pages));
    std::iota(pages_.begin(), pages_.end(), 0);
  }

  /// Appends `tokens` to the stream; returns the logits [vocab] after the last one.
  std::span<float const> feed(std::span<std::int32_t const> tokens) {
    if (static_cast<std::int64_t>(pos_) + static_cast<std::int64_t>(tokens.size()) > context_)
      throw error("tf: {} tokens at position {} pass the stream's context of {}", tokens.size(),
                  pos_, context_);
    batch_row row{tokens, pos_, pages_, false};
    logits_.resize(static_cast<std::size_t>(fwd_->vocab_size()));
    fwd_->forward({&row, 1}, logits_.data());
    pos_ += static_cast<std::int32_t>(tokens.size());
    return logits_;
  }

  std::int32_t position() const { return pos_; }

 private:
  std::unique_ptr<Forward> fwd_;
  std::int32_t context_;
  std::int32_t pos_ = 0;
  std::vector<std::int32_t> pages_;
  std::vector<float> logits_;
};

}  // namespace tf::families
