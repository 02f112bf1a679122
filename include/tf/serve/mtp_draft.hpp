#pragma once
/// An MTP head as a draft source: the target's final hidden state at the last position it ran
/// and the pending token give the head's greedy next token; each further draft feeds the head its
/// own hidden state and its last draft. The head's layer attends over the positions it ran for
/// the stream, so it keeps a KV stream per recent history, as the draft model does.
#include <tf/engine/mtp_head.hpp>
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

class mtp_draft final : public draft_source {
 public:
  /// Runs `head` with `streams` KV streams of `window` positions (as many as the target's lanes).
  mtp_draft(std::unique_ptr<mtp_head> head, std::size_t streams, std::int32_t window)
      : head_(std::move(head)), window_(window) {
    if (!head_) throw error("tf: the MTP head is missing");
    if (streams == 0 || window < 2)
      throw error("tf: MTP drafts need at least one stream of 2 positions (got {} of {})", streams,
                  window);
    head_->set_streams(window, static_cast<std::int32_t>(streams));
    auto const kv = head_->kv();
    auto const per = (window + kv.page_tokens - 1) / kv.page_tokens;
    for (std::size_t i = 0; i < streams; ++i) {
      cache c;
      for (std::int32_t p = 0; p < per; ++p)
        c.pages.push_back(static_cast<std::int32_t>(i) * per + p);
      caches_.push_back(std::move(c));
    }
    width_ = static_cast<std::size_t>(head_->hidden_size());
    logits_.resize(static_cast<std::size_t>(head_->vocab_size()));
  }

  std::string_view name() const override { return "mtp"; }
  std::size_t hidden_size() const override { return width_; }
  mtp_head const& head() const { return *head_; }

  void observe(std::span<std::int32_t const> tokens, std::size_t first,
               std::span<float const> hidden) override {
    auto const n = hidden.size() / width_;
    if (n == 0 || tokens.size() != first + n) return;
    auto& c = closest(tokens);
    c.used = ++clock_;
    // Hidden states of positions from `first` on replace what the cache held there; positions
    // before `first` it never saw (a reused prompt prefix) have none.
    auto const keep = std::min({c.seen.size(), first, detail::common_prefix(c.seen, tokens)});
    c.seen.assign(tokens.begin(), tokens.end());
    if (keep < c.hid_from || keep < first) {
      c.hid.clear();
      c.hid_from = first;
    } else {
      c.hid.resize((first - c.hid_from) * width_);
    }
    c.hid.insert(c.hid.end(), hidden.begin(), hidden.end());
    // Every position but the last has its next token: into the head's KV now, so only the last
    // state is kept (a long prompt's states would otherwise wait for the first proposal).
    catch_up(c, c.seen, c.seen.size() - 1, c.seen.size() - 1);
  }

  void propose(std::span<std::int32_t const> h, std::size_t max,
               std::vector<std::int32_t>& out) override {
    if (h.size() < 2 || max == 0) return;
    auto const last = h.size() - 2;  // the last position the target ran
    max =
        std::min(max, static_cast<std::size_t>(window_) - std::min<std::size_t>(h.size(), window_));
    if (max == 0) return;
    cache* c = nullptr;
    for (auto& k : caches_)
      if (k.seen.size() == last + 1 && detail::common_prefix(k.seen, h) == last + 1 &&
          k.hid_from <= last)
        c = &k;
    if (!c) return;
    c->used = ++clock_;
    catch_up(*c, h, last, last + 1);  // at least the last position: its logits give the first
    step_.assign(own_.end() - static_cast<std::ptrdiff_t>(width_), own_.end());
    for (std::size_t i = 0; i < max; ++i) {
      auto const t = static_cast<std::int32_t>(std::max_element(logits_.begin(), logits_.end()) -
                                               logits_.begin());
      out.push_back(t);
      if (i + 1 == max) break;
      // The draft at position last + 1 + i reads the head's own state of the position before.
      batch_row d{std::span<std::int32_t const>(&out.back(), 1),
                  static_cast<std::int32_t>(last + 1 + i), c->pages, false, -1};
      head_->forward({&d, 1}, step_.data(), logits_.data(), own_.data());
      step_.assign(own_.begin(), own_.begin() + static_cast<std::ptrdiff_t>(width_));
    }
  }

 private:
  struct cache {
    std::vector<std::int32_t> seen;  // the stream's tokens through the last observed position
    std::vector<float> hid;          // the target's hidden states of positions hid_from ..
    std::size_t hid_from = 0;
    std::vector<std::int32_t> fed;  // the tokens the head's positions below `done` read
    std::size_t done = 0;
    std::vector<std::int32_t> pages;
    std::uint64_t used = 0;
  };

  // Runs the head over its positions from the first it lacks, or whose next token changed, but
  // from `from` at the latest, up to `upto` (exclusive; h holds each one's next token), reading
  // the target's states; then keeps only the states from position upto - 1 on. Positions without
  // the target's state (a reused prompt prefix) are skipped, not run.
  void catch_up(cache& c, std::span<std::int32_t const> h, std::size_t from, std::size_t upto) {
    auto done = std::min({c.done, detail::common_prefix(c.fed, h.subspan(1)), from});
    done = std::max(done, c.hid_from);
    if (done >= upto) return;
    auto const rows = upto - done;
    batch_row r{h.subspan(done + 1, rows), static_cast<std::int32_t>(done), c.pages, false, -1};
    own_.resize(rows * width_);
    head_->forward({&r, 1}, c.hid.data() + (done - c.hid_from) * width_, logits_.data(),
                   own_.data());
    c.fed.assign(h.begin() + 1, h.begin() + static_cast<std::ptrdiff_t>(upto + 1));
    c.done = upto;
    auto const drop = upto - 1 - c.hid_from;
    c.hid.erase(c.hid.begin(), c.hid.begin() + static_cast<std::ptrdiff_t>(drop * width_));
    c.hid_from = upto - 1;
  }

  // The cache sharing the longest prefix with `h`; the least recently used one when none does.
  cache& closest(std::span<std::int32_t const> h) {
    return detail::closest(caches_, h, [](cache const& c) { return std::span(c.seen); });
  }

  std::unique_ptr<mtp_head> head_;
  std::int32_t window_;
  std::size_t width_ = 0;
  std::vector<cache> caches_;
  std::vector<float> logits_, own_, step_;
  std::uint64_t clock_ = 0;
};

}  // namespace tf::serve
