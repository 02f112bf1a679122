#pragma once
/// A drafter that reads the target's own KV (Gemma 4's assistant) as a draft source: from the
/// target's final hidden state at the last position it ran and the pending token, each step gives
/// the drafter's greedy next token and the state its next step reads, every step at the pending
/// token's position over the stream's KV pages. It keeps only each recent history's last state.
#include <tf/engine/target_kv_head.hpp>
#include <tf/error.hpp>
#include <tf/serve/detail/history_match.hpp>
#include <tf/serve/draft_source.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace tf::serve {

class assistant_draft final : public draft_source {
 public:
  /// Runs `head`, keeping the last states of `streams` recent histories (as many as the
  /// target's lanes).
  assistant_draft(std::unique_ptr<target_kv_head> head, std::size_t streams)
      : head_(std::move(head)) {
    if (!head_) throw error("tf: the assistant drafter is missing");
    if (streams == 0) throw error("tf: assistant drafts need at least one stream");
    caches_.resize(streams);
    width_ = static_cast<std::size_t>(head_->hidden_size());
    logits_.resize(static_cast<std::size_t>(head_->vocab_size()));
    step_.resize(width_);
    next_.resize(width_);
  }

  std::string_view name() const override { return "assistant"; }
  std::size_t hidden_size() const override { return width_; }
  target_kv_head const& head() const { return *head_; }

  void observe(std::span<std::int32_t const> tokens, std::size_t first,
               std::span<float const> hidden) override {
    auto const n = hidden.size() / width_;
    if (n == 0 || tokens.size() != first + n) return;
    auto& c = detail::closest(caches_, tokens, [](cache const& k) { return std::span(k.seen); });
    c.used = ++clock_;
    c.seen.assign(tokens.begin(), tokens.end());
    c.last.assign(hidden.end() - static_cast<std::ptrdiff_t>(width_), hidden.end());
  }

  /// Without the stream's pages it cannot read the target's KV: no drafts.
  void propose(std::span<std::int32_t const>, std::size_t, std::vector<std::int32_t>&) override {}

  void propose_at(std::span<std::int32_t const> h, std::span<std::int32_t const> pages,
                  std::size_t max, std::vector<std::int32_t>& out) override {
    if (h.size() < 2 || max == 0 || pages.empty()) return;
    auto const pos = h.size() - 1;  // the pending token's; the target ran every one before it
    cache* c = nullptr;
    for (auto& k : caches_)
      if (k.seen.size() == pos && detail::common_prefix(k.seen, h) == pos) c = &k;
    if (!c) return;
    c->used = ++clock_;
    // The pages hold the positions before `pos`; the step's own position reads no KV, but its
    // page table must reach it.
    pages_.assign(pages.begin(), pages.end());
    pages_.push_back(pages.back());
    std::copy(c->last.begin(), c->last.end(), step_.begin());
    auto token = h.back();
    for (std::size_t i = 0; i < max; ++i) {
      batch_row const r{std::span<std::int32_t const>(&token, 1), static_cast<std::int32_t>(pos),
                        pages_, false, -1};
      head_->forward({&r, 1}, step_.data(), logits_.data(), i + 1 < max ? next_.data() : nullptr);
      token = static_cast<std::int32_t>(std::max_element(logits_.begin(), logits_.end()) -
                                        logits_.begin());
      out.push_back(token);
      std::swap(step_, next_);
    }
  }

 private:
  struct cache {
    std::vector<std::int32_t> seen;  // the stream's tokens through the last observed position
    std::vector<float> last;         // the target's final hidden state there
    std::uint64_t used = 0;
  };

  std::unique_ptr<target_kv_head> head_;
  std::size_t width_ = 0;
  std::vector<cache> caches_;
  std::vector<float> logits_, step_, next_;
  std::vector<std::int32_t> pages_;
  std::uint64_t clock_ = 0;
};

}  // namespace tf::serve
