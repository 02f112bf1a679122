#pragma once
/// A draft model as a draft source: a smaller model with the target's tokenizer proposes its greedy
/// continuation of a stream's history, running only what the history adds to the KV it holds.
/// Once bound to the target's pool (bind_target_pool), an attention-only draft model keeps its KV
/// in pages that mirror the target's: page p of its store holds the positions page p of the target
/// holds, so the ledger's promise of a target page is the promise of the draft's too, and each
/// stream's draft KV lives as long as its pages. Otherwise (and always for a recurrent draft
/// model, whose state cannot go back) it keeps its own store of a few recent histories.
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

  /// Bytes of its KV per target position once its pages mirror the target's (what the budget adds
  /// to each target position's); 0 for a recurrent draft model, which keeps its own store.
  std::uint64_t kv_bytes_per_token() const {
    if (model_->recurrent()) return 0;
    auto const k = model_->kv();
    return model_->store_bytes() /
           (static_cast<std::uint64_t>(k.num_pages) * static_cast<std::uint64_t>(k.page_tokens));
  }
  /// Whether its KV mirrors the target's pages.
  bool mirrors() const { return !meta_.empty(); }

  void bind_target_pool(kv_shape target) override {
    if (model_->recurrent()) return;
    if (target.num_pages <= 0 || target.page_tokens <= 0)
      throw error("tf: a draft model mirrors a pool of pages (got {} of {} tokens)",
                  target.num_pages, target.page_tokens);
    if (model_->kv().page_tokens != target.page_tokens)
      throw error(
          "tf: the draft model's pages hold {} tokens and the target's {}: open it with "
          "the target's page_tokens",
          model_->kv().page_tokens, target.page_tokens);
    model_->set_streams(target.num_pages * target.page_tokens, 1);
    page_tokens_ = static_cast<std::size_t>(target.page_tokens);
    meta_.assign(static_cast<std::size_t>(target.num_pages), {});
    caches_.clear();
  }

  bool writes_ahead() const override { return mirrors(); }

  void propose_at(std::span<std::int32_t const> h, std::span<std::int32_t const> pages,
                  std::size_t max, std::vector<std::int32_t>& out) override {
    if (!mirrors()) return propose(h, max, out);
    if (h.empty() || max == 0) return;
    // It writes the positions of the history and of every draft but the last: the stream's pages
    // (held ahead by the lane host) must reach them.
    auto const reach = pages.size() * page_tokens_;
    if (reach < h.size()) return;
    max = std::min(max, reach - h.size() + 1);
    drafted_.assign(h.begin(), h.end());
    bounds_.assign(1, 0);
    auto const keep = std::min(valid_prefix(drafted_, pages), h.size() - 1);
    run(drafted_, keep, drafted_.size(), pages);
    for (std::size_t i = 0; i < max; ++i) {
      auto const t = static_cast<std::int32_t>(std::max_element(logits_.begin(), logits_.end()) -
                                               logits_.begin());
      out.push_back(t);
      if (i + 1 == max) break;
      drafted_.push_back(t);
      run(drafted_, drafted_.size() - 1, drafted_.size(), pages);
    }
  }

  /// Without the stream's pages a mirroring draft model proposes nothing.
  void propose(std::span<std::int32_t const> h, std::size_t max,
               std::vector<std::int32_t>& out) override {
    if (h.empty() || max == 0 || mirrors()) return;
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

  // What the draft wrote into one page: the hash of every position before the page, and the
  // tokens of the page's positions from its first on.
  struct page_meta {
    std::uint64_t before = 0;
    std::vector<std::int32_t> tokens;
  };

  // The hash of a history prefix, extended by one token (a draft KV whose prefix only collides
  // costs drafts, never a token of the reply).
  static std::uint64_t extend(std::uint64_t hash, std::int32_t token) {
    return (hash ^ static_cast<std::uint32_t>(token)) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
  }

  // The hash of positions [0, page * page_tokens) of `seq`, which only grows within a proposal:
  // bounds_ keeps each page boundary's, extended as asked.
  std::uint64_t before_page(std::span<std::int32_t const> seq, std::size_t page) {
    while (bounds_.size() <= page) {
      auto const first = (bounds_.size() - 1) * page_tokens_;
      auto hash = bounds_.back();
      for (std::size_t i = first; i < first + page_tokens_; ++i) hash = extend(hash, seq[i]);
      bounds_.push_back(hash);
    }
    return bounds_[page];
  }

  // The positions of `h` whose draft KV the stream's pages hold: whole pages written for this
  // prefix, then the matching start of the next.
  std::size_t valid_prefix(std::span<std::int32_t const> h, std::span<std::int32_t const> pages) {
    std::size_t at = 0;
    for (std::size_t page = 0; page < pages.size() && at < h.size(); ++page) {
      auto const& m = meta_[static_cast<std::size_t>(pages[page])];
      if (m.before != before_page(h, page)) return at;
      auto const n = std::min({m.tokens.size(), page_tokens_, h.size() - at});
      auto const same = detail::common_prefix(std::span(m.tokens).first(n), h.subspan(at, n));
      if (same < page_tokens_) return at + same;
      at += page_tokens_;
    }
    return std::min(at, h.size());
  }

  // Runs positions [from, upto) of `seq` in the stream's pages (logits_ gets the last one's) and
  // records what each page it wrote now holds.
  void run(std::span<std::int32_t const> seq, std::size_t from, std::size_t upto,
           std::span<std::int32_t const> pages) {
    batch_row r{seq.subspan(from, upto - from), static_cast<std::int32_t>(from), pages, false, -1};
    model_->forward({&r, 1}, logits_.data());
    for (auto page = from / page_tokens_; page * page_tokens_ < upto; ++page) {
      auto const first = page * page_tokens_;
      auto const kept = from > first ? from - first : 0;  // positions it held before
      auto& m = meta_[static_cast<std::size_t>(pages[page])];
      auto const before = before_page(seq, page);
      if (m.before != before || m.tokens.size() < kept) {
        // What it held is not this prefix's: only a page written from its start is vouched for.
        m.before = before;
        m.tokens.clear();
        if (kept > 0) continue;
      }
      m.tokens.resize(kept);
      m.tokens.insert(
          m.tokens.end(), seq.begin() + static_cast<std::ptrdiff_t>(first + kept),
          seq.begin() + static_cast<std::ptrdiff_t>(std::min(first + page_tokens_, upto)));
    }
  }

  std::unique_ptr<loaded_model> model_;
  std::int32_t window_;
  std::size_t page_tokens_ = 0;
  std::vector<page_meta> meta_;  // per page of the target's pool, once mirrored
  std::vector<std::int32_t> drafted_;
  std::vector<std::uint64_t> bounds_;  // before_page's hashes for the proposal at hand
  std::vector<cache> caches_;
  std::vector<float> logits_;
  std::uint64_t clock_ = 0;
};

}  // namespace tf::serve
