#pragma once
/// kv::prompt_store: kept prompt states for prefix reuse, evicted least recently used first.
#include <tf/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace tf::kv {

/// One kept prompt: its tokens, the pages holding their KV, and a recurrent-state slot (or -1).
struct prompt_entry {
  std::uint64_t id = 0;
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> pages;
  std::int32_t slot = -1;
  std::uint64_t last_used = 0;
};

/// The best kept prompt for a new one: which entry, and how many leading tokens it gives.
struct prompt_match {
  std::uint64_t entry = 0;
  std::int64_t tokens = 0;
};

/// How a new prompt may reuse a kept one.
struct reuse_rule {
  std::int64_t page_tokens = 0;  // reuse whole pages of this many tokens; 0: any length
  bool whole_only = false;       // a recurrent state exists only at the entry's end
};

/// How two token sequences relate: is `a` a prefix of `b` (equal counts)?
inline bool is_prefix(std::span<std::int32_t const> a, std::span<std::int32_t const> b) {
  return a.size() <= b.size() && std::ranges::equal(a, b.first(a.size()));
}

/// Kept prompt states. The store only keeps the list; the pool owns the page reference counts.
/// Eviction is least recently used: a prefix that was reused (or kept) lately is the one most
/// likely to be asked for again (a chat's next turn, a shared system prompt).
class prompt_store {
 public:
  /// Adds an entry and returns its id; it becomes the most recently used.
  std::uint64_t add(std::vector<std::int32_t> tokens, std::vector<std::int32_t> pages,
                    std::int32_t slot) {
    prompt_entry e;
    e.id = next_id_++;
    e.tokens = std::move(tokens);
    e.pages = std::move(pages);
    e.slot = slot;
    e.last_used = ++tick_;
    entries_.push_back(std::move(e));
    return entries_.back().id;
  }

  /// The entry giving the most leading tokens of `prompt` (at most `limit`), newest on a tie.
  std::optional<prompt_match> best(std::span<std::int32_t const> prompt, std::int64_t limit,
                                   reuse_rule rule) const {
    std::optional<prompt_match> out;
    std::uint64_t out_used = 0;
    for (auto const& e : entries_) {
      std::int64_t n = usable(e, prompt, limit, rule);
      if (n <= 0) continue;
      if (!out || n > out->tokens || (n == out->tokens && e.last_used > out_used)) {
        out = prompt_match{e.id, n};
        out_used = e.last_used;
      }
    }
    return out;
  }

  /// An entry with exactly these tokens, if kept.
  std::optional<std::uint64_t> find_exact(std::span<std::int32_t const> tokens) const {
    for (auto const& e : entries_)
      if (std::ranges::equal(e.tokens, tokens)) return e.id;
    return std::nullopt;
  }

  /// An entry without a state slot whose tokens start with `tokens` (it gives all they would).
  std::optional<std::uint64_t> find_covering(std::span<std::int32_t const> tokens) const {
    for (auto const& e : entries_)
      if (e.slot < 0 && is_prefix(tokens, e.tokens)) return e.id;
    return std::nullopt;
  }

  /// Entries without a state slot whose tokens are a strict prefix of `tokens` (a longer entry
  /// gives all they would, so they only hold pages).
  std::vector<std::uint64_t> covered_by(std::span<std::int32_t const> tokens) const {
    std::vector<std::uint64_t> out;
    for (auto const& e : entries_)
      if (e.slot < 0 && e.tokens.size() < tokens.size() && is_prefix(e.tokens, tokens))
        out.push_back(e.id);
    return out;
  }

  /// Marks an entry as just used.
  void touch(std::uint64_t id) { entry_mut(id).last_used = ++tick_; }

  /// The least recently used entry, if any.
  std::optional<std::uint64_t> lru() const {
    if (entries_.empty()) return std::nullopt;
    auto it = std::ranges::min_element(entries_, {}, &prompt_entry::last_used);
    return it->id;
  }

  /// Removes and returns an entry.
  prompt_entry remove(std::uint64_t id) {
    auto it = std::ranges::find(entries_, id, &prompt_entry::id);
    if (it == entries_.end()) throw error("tf::kv::prompt_store::remove: no entry {}", id);
    prompt_entry e = std::move(*it);
    entries_.erase(it);
    return e;
  }

  prompt_entry const& get(std::uint64_t id) const {
    auto it = std::ranges::find(entries_, id, &prompt_entry::id);
    if (it == entries_.end()) throw error("tf::kv::prompt_store: no entry {}", id);
    return *it;
  }

  std::span<prompt_entry const> entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

 private:
  prompt_entry& entry_mut(std::uint64_t id) {
    return const_cast<prompt_entry&>(std::as_const(*this).get(id));
  }

  static std::int64_t usable(prompt_entry const& e, std::span<std::int32_t const> prompt,
                             std::int64_t limit, reuse_rule rule) {
    auto n = static_cast<std::int64_t>(std::min(e.tokens.size(), prompt.size()));
    std::int64_t common = 0;
    while (common < n &&
           e.tokens[static_cast<std::size_t>(common)] == prompt[static_cast<std::size_t>(common)])
      ++common;
    // A recurrent state exists only at the entry's end, and only where it kept one.
    if (rule.whole_only)
      return e.slot >= 0 && common == static_cast<std::int64_t>(e.tokens.size()) && common <= limit
                 ? common
                 : 0;
    common = std::min(common, limit);
    if (rule.page_tokens > 0) common -= common % rule.page_tokens;
    return common;
  }

  std::vector<prompt_entry> entries_;
  std::uint64_t next_id_ = 1;
  std::uint64_t tick_ = 0;
};

}  // namespace tf::kv
