#pragma once
/// A draft model as a draft source: a smaller model with the target's tokenizer proposes its greedy
/// continuation of a stream's history. It keeps the KV of a few recent histories and runs only
/// what a history adds to the closest one.
#include <tf/engine/loaded_model.hpp>
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

class model_draft final : public draft_source {
 public:
  /// Runs `model` with `streams` KV streams of `window` positions each (as many as the target's
  /// lanes, so each lane's history usually finds its own).
  model_draft(std::unique_ptr<loaded_model> model, std::size_t streams, std::int32_t window)
      : model_(std::move(model)), window_(window) {
    if (!model_) throw error("tf: the draft model is missing");
    if (streams == 0 || window < 2)
      throw error("tf: a draft model needs at least one stream of 2 positions (got {} of {})",
                  streams, window);
    model_->set_streams(window, static_cast<std::int32_t>(streams));
    auto const kv = model_->kv();
    auto const per = (window + kv.page_tokens - 1) / kv.page_tokens;
    for (std::size_t i = 0; i < streams; ++i) {
      cache c;
      c.slot = kv.num_state_slots > 0 ? static_cast<std::int32_t>(i) : -1;
      for (std::int32_t p = 0; p < per; ++p)
        c.pages.push_back(static_cast<std::int32_t>(i) * per + p);
      caches_.push_back(std::move(c));
    }
    logits_.resize(static_cast<std::size_t>(model_->vocab_size()));
  }

  std::string_view name() const override { return "model"; }
  loaded_model const& model() const { return *model_; }

  void propose(std::span<std::int32_t const> h, std::size_t max,
               std::vector<std::int32_t>& out) override {
    if (h.empty() || max == 0) return;
    auto const room = static_cast<std::size_t>(window_) - std::min<std::size_t>(h.size(), window_);
    max = std::min(max, room);
    if (max == 0) return;
    auto& c = closest(h);
    c.used = ++clock_;
    // Recurrent state cannot go back: such a model reads the history from the start unless its
    // cache is exactly a prefix of it.
    // At least one token runs, for its logits.
    auto keep = std::min(detail::common_prefix(c.tokens, h), h.size() - 1);
    if (model_->recurrent() && keep < c.tokens.size()) keep = 0;
    c.tokens.resize(keep);
    feed(c, h.subspan(keep));
    for (std::size_t i = 0; i < max; ++i) {
      auto const t = static_cast<std::int32_t>(std::max_element(logits_.begin(), logits_.end()) -
                                               logits_.begin());
      out.push_back(t);
      if (i + 1 < max) feed(c, std::span<std::int32_t const>(&t, 1));
    }
  }

 private:
  struct cache {
    std::vector<std::int32_t> tokens;  // what its KV (and state) hold, from position 0
    std::vector<std::int32_t> pages;
    std::int32_t slot = -1;
    std::uint64_t used = 0;
  };

  // The cache sharing the longest prefix with `h`; the least recently used one when none does.
  cache& closest(std::span<std::int32_t const> h) {
    return detail::closest(caches_, h, [](cache const& c) { return std::span(c.tokens); });
  }

  // Runs `toks` at the cache's end; logits_ gets the last one's.
  void feed(cache& c, std::span<std::int32_t const> toks) {
    batch_row r{toks, static_cast<std::int32_t>(c.tokens.size()), c.pages, false, c.slot};
    model_->forward({&r, 1}, logits_.data());
    c.tokens.insert(c.tokens.end(), toks.begin(), toks.end());
  }

  std::unique_ptr<loaded_model> model_;
  std::int32_t window_;
  std::vector<cache> caches_;
  std::vector<float> logits_;
  std::uint64_t clock_ = 0;
};

}  // namespace tf::serve
