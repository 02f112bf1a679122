#pragma once
/// Draft sources for speculative decoding: tokens proposed to follow a stream's history, which the
/// lane host verifies with the target's own sampler (so they change speed, never the reply).
#include <tf/batch.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

/// Proposes tokens to follow a history. A proposal must be a pure function of the history (the
/// lane host may ask again for the same history and relies on nothing else).
class draft_source {
 public:
  virtual ~draft_source() = default;
  /// The source's name in metrics and logs (`ngram`, `model`, `mtp`).
  virtual std::string_view name() const = 0;
  /// Appends at most `max` proposed tokens to `out`.
  virtual void propose(std::span<std::int32_t const> history, std::size_t max,
                       std::vector<std::int32_t>& out) = 0;
  /// The same for a stream of the target whose KV pages are `pages` (positions 0, page_tokens,
  /// ...): a source that reads the target's KV (Gemma 4's assistant) overrides it.
  virtual void propose_at(std::span<std::int32_t const> history,
                          std::span<std::int32_t const> pages, std::size_t max,
                          std::vector<std::int32_t>& out) {
    (void)pages;
    propose(history, max, out);
  }
  /// The target's KV pool, once it exists: a source that keeps its KV in pages mirroring the
  /// target's (a draft model) sizes its store to it.
  virtual void bind_target_pool(kv_shape target) { (void)target; }
  /// Whether propose_at writes KV of its own at the stream's positions from the pending token on,
  /// in pages mirroring the target's: the lane host then holds those pages before it proposes.
  virtual bool writes_ahead() const { return false; }
  /// Sources that read the target's final hidden states (MTP heads): their width; 0: none.
  virtual std::size_t hidden_size() const { return 0; }
  /// The target ran positions `first` .. `first + n - 1` of a stream whose tokens through them are
  /// `tokens` (tokens.size() == first + n); `hidden` [n, hidden_size()] are their final hidden
  /// states. Only positions whose tokens stand (prompt, emitted, accepted drafts) are observed.
  virtual void observe(std::span<std::int32_t const> tokens, std::size_t first,
                       std::span<float const> hidden) {
    (void)tokens, (void)first, (void)hidden;
  }
};

/// How the n-gram source matches.
struct ngram_config {
  std::size_t min_match = 2;  // shortest history suffix that may match
  std::size_t max_match = 4;  // longest suffix tried first
};

/// Prompt lookup: the longest suffix of the history (max_match down to min_match tokens) that
/// also occurs earlier in it proposes the tokens that followed its latest earlier occurrence.
/// Needs no model, and costs one scan of the history per round.
class ngram_draft final : public draft_source {
 public:
  explicit ngram_draft(ngram_config c = {}) : cfg_(c) {
    if (c.min_match == 0 || c.max_match < c.min_match)
      throw error("tf: n-gram drafts need 1 <= min_match <= max_match (got {} and {})", c.min_match,
                  c.max_match);
  }

  std::string_view name() const override { return "ngram"; }
  ngram_config const& config() const { return cfg_; }

  void propose(std::span<std::int32_t const> h, std::size_t max,
               std::vector<std::int32_t>& out) override {
    if (max == 0) return;
    auto const n = h.size();
    for (auto len = std::min(cfg_.max_match, n > 0 ? n - 1 : 0); len >= cfg_.min_match; --len) {
      auto const suffix = h.subspan(n - len);
      // Latest earlier occurrence first: recent text predicts the next tokens best.
      for (std::size_t start = n - len; start-- > 0;) {
        if (!std::equal(suffix.begin(), suffix.end(),
                        h.begin() + static_cast<std::ptrdiff_t>(start)))
          continue;
        auto const from = start + len;
        auto const take = std::min(max, n - from);
        out.insert(out.end(), h.begin() + static_cast<std::ptrdiff_t>(from),
                   h.begin() + static_cast<std::ptrdiff_t>(from + take));
        return;
      }
    }
  }

 private:
  ngram_config cfg_;
};

/// A decode round's time as its rows grow, fitted from the rounds' own times: t = a + b rows by
/// least squares over the recent rounds (each older one weighing 1/64 less). fixed_rows() = a / b,
/// the part that does not grow with the rows in rows' worth, once the rounds seen differ enough
/// in rows to tell a from b. What it is depends on the machine and the model (one stream's
/// round is mostly reading the weights; on some CPUs eight rows are arithmetic already).
class round_cost_fit {
 public:
  void add(double rows, double seconds) {
    constexpr double keep = 63.0 / 64.0;
    ++rounds_;
    w_ = w_ * keep + 1;
    r_ = r_ * keep + rows;
    t_ = t_ * keep + seconds;
    rr_ = rr_ * keep + rows * rows;
    rt_ = rt_ * keep + rows * seconds;
  }

  /// a / b in [0, 64], or nothing before 8 rounds or while their rows differ by less than about
  /// half a row, or where more rows did not take longer.
  std::optional<double> fixed_rows() const {
    if (rounds_ < 8) return std::nullopt;
    double const mr = r_ / w_, mt = t_ / w_;
    double const var = rr_ / w_ - mr * mr;
    if (!(var >= 0.25)) return std::nullopt;
    double const b = (rt_ / w_ - mr * mt) / var;
    if (!(b > 0)) return std::nullopt;
    return std::clamp((mt - b * mr) / b, 0.0, 64.0);
  }

 private:
  std::size_t rounds_ = 0;
  double w_ = 0, r_ = 0, t_ = 0, rr_ = 0, rt_ = 0;
};

/// How the lane host drafts: the source (none: no drafts) and how many tokens it may propose.
struct draft_config {
  std::shared_ptr<draft_source> source;  // null: decode one token per stream per round
  // A drafter that reads the target's own KV (Gemma 4's assistant): its model file, which
  // open_served opens beside the engine as `source`, through the family's target_kv_drafter.
  std::filesystem::path target_kv_drafter;
  std::size_t max_tokens = 8;     // most drafts in one stream's verify row
  std::size_t round_tokens = 32;  // most drafts in one round, over all streams
  // The part of a round's time that does not grow with its rows (the weights read once, the
  // round's fixed work), in rows' worth of the per-row arithmetic; see pays_at. Infinite: every
  // round drafts.
  double fixed_rows = 1.25;
  // Whether the lane host replaces fixed_rows by the rounds' own measure (round_cost_fit) once
  // it has one; fixed_rows is the prior until then.
  bool measure_rows = true;

  /// The acceptance a stream's drafts need in a round where `streams` streams decode. A round
  /// of R rows takes about (fixed + R) row-times; without drafts S streams emit S tokens in
  /// (fixed + S), so one more row pays when it adds more than S / (fixed + S) tokens: little at
  /// one stream, nearly a whole token once plain decode fills the batch.
  double pays_at(std::size_t streams, double fixed) const {
    auto const s = static_cast<double>(streams);
    return s / (fixed + s);
  }
  double pays_at(std::size_t streams) const { return pays_at(streams, fixed_rows); }
};

}  // namespace tf::serve
