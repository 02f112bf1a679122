#pragma once
/// Grammar-constrained decoding over a vocabulary: the vocab's token bytes as a trie, a compiled
/// grammar bound to it (with a cache of allowed-token masks per pushdown state), and one stream's
/// state, which masks a logits row and advances by the sampled token.
#include <tf/grammar/matcher.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tf::grammar {

/// Every token's bytes (empty: a control token, never allowed) as a trie in preorder.
class token_table {
 public:
  explicit token_table(std::vector<std::string> bytes) : bytes_(std::move(bytes)) {
    std::vector<std::int32_t> ids;
    for (std::size_t i = 0; i < bytes_.size(); ++i)
      if (!bytes_[i].empty()) ids.push_back(static_cast<std::int32_t>(i));
    std::ranges::sort(ids, [&](auto a, auto b) {
      return bytes_[a] < bytes_[b] || (bytes_[a] == bytes_[b] && a < b);
    });
    sorted_ = ids;
    std::vector<std::uint32_t> open;  // the nodes on the path to the last token
    std::string_view prev;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      std::string_view const t = bytes_[ids[k]];
      std::size_t lcp = 0;
      while (lcp < prev.size() && lcp < t.size() && prev[lcp] == t[lcp]) ++lcp;
      if (lcp == t.size() && lcp == prev.size()) {  // the same bytes as the last token
        nodes_[open.back()].tok_end = static_cast<std::uint32_t>(k + 1);
        continue;
      }
      while (open.size() > lcp) {
        nodes_[open.back()].subtree_end = static_cast<std::uint32_t>(nodes_.size());
        open.pop_back();
      }
      for (std::size_t d = lcp; d < t.size(); ++d) {
        node n;
        n.byte = static_cast<unsigned char>(t[d]);
        n.depth = static_cast<std::uint32_t>(d + 1);
        n.tok_begin = n.tok_end = static_cast<std::uint32_t>(k);
        open.push_back(static_cast<std::uint32_t>(nodes_.size()));
        nodes_.push_back(n);
      }
      nodes_.back().tok_end = static_cast<std::uint32_t>(k + 1);
      max_depth_ = std::max(max_depth_, t.size());
      prev = t;
    }
    for (auto i : open) nodes_[i].subtree_end = static_cast<std::uint32_t>(nodes_.size());
  }

  std::size_t size() const { return bytes_.size(); }
  std::string const& bytes(std::int32_t t) const { return bytes_[static_cast<std::size_t>(t)]; }

  /// Sets in `mask` (one bit per token) every token whose bytes `m` accepts from `start`.
  void allowed(matcher& m, stack_set const& start, std::vector<std::uint64_t>& mask) const {
    std::vector<stack_set> level(max_depth_ + 1);
    level[0] = start;
    std::size_t i = 0;
    while (i < nodes_.size()) {
      auto const& n = nodes_[i];
      m.advance(level[n.depth - 1], n.byte, level[n.depth]);
      if (level[n.depth].empty()) {
        i = n.subtree_end;
        continue;
      }
      for (auto k = n.tok_begin; k < n.tok_end; ++k) {
        auto const t = static_cast<std::size_t>(sorted_[k]);
        mask[t >> 6] |= std::uint64_t{1} << (t & 63);
      }
      ++i;
    }
  }
  std::size_t nodes() const { return nodes_.size(); }

 private:
  struct node {
    unsigned char byte = 0;
    std::uint32_t depth = 0, subtree_end = 0, tok_begin = 0, tok_end = 0;
  };
  std::vector<std::string> bytes_;
  std::vector<std::int32_t> sorted_;  // non-empty token ids by bytes
  std::vector<node> nodes_;
  std::size_t max_depth_ = 0;
};

/// A grammar bound to a vocabulary and its end-of-generation tokens; shared by every stream that
/// decodes under it. Masks are cached per pushdown state (a pure function of it, so a cached
/// mask changes no result).
class constraint {
 public:
  using mask_type = std::vector<std::uint64_t>;

  constraint(std::shared_ptr<grammar const> g, std::shared_ptr<token_table const> table,
             std::vector<std::int32_t> eos, std::size_t max_cached = 4096)
      : g_(std::move(g)), table_(std::move(table)), eos_(std::move(eos)), max_cached_(max_cached) {}

  grammar const& rules() const { return *g_; }
  token_table const& table() const { return *table_; }
  bool is_eos(std::int32_t t) const { return std::ranges::find(eos_, t) != eos_.end(); }

  /// The tokens allowed in state `s` (end-of-generation ones where the root can be complete).
  std::shared_ptr<mask_type const> allowed(stack_set const& s) const {
    auto key = s.key();
    {
      std::lock_guard lock(mutex_);
      if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    auto mask = std::make_shared<mask_type>((table_->size() + 63) / 64, 0);
    matcher m(*g_);
    table_->allowed(m, s, *mask);
    bool const accepting = s.accepting();
    bool any = false;
    for (auto w : *mask) any = any || w != 0;
    for (auto t : eos_)
      if ((accepting || !any) && t >= 0 && static_cast<std::size_t>(t) < table_->size())
        (*mask)[static_cast<std::size_t>(t) >> 6] |= std::uint64_t{1} << (t & 63);
    std::lock_guard lock(mutex_);
    if (cache_.size() >= max_cached_) cache_.clear();
    cache_.emplace(std::move(key), mask);
    return mask;
  }

 private:
  std::shared_ptr<grammar const> g_;
  std::shared_ptr<token_table const> table_;
  std::vector<std::int32_t> eos_;
  std::size_t max_cached_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::shared_ptr<mask_type const>> cache_;
};

/// One stream's place in the grammar.
class constraint_state {
 public:
  explicit constraint_state(std::shared_ptr<constraint const> c)
      : c_(std::move(c)), m_(c_->rules()), s_(m_.initial()) {}

  /// Sets every logit the grammar refuses now to -inf (tokens past the vocabulary too).
  void mask(std::span<float> logits) {
    auto const allowed = c_->allowed(s_);
    auto const& bits = *allowed;
    auto const n = std::min(logits.size(), c_->table().size());
    float const ninf = -std::numeric_limits<float>::infinity();
    for (std::size_t w = 0; w * 64 < n; ++w) {
      auto const word = bits[w];
      if (word == ~std::uint64_t{0}) continue;
      auto const end = std::min(n, w * 64 + 64);
      for (std::size_t i = w * 64; i < end; ++i)
        if (!((word >> (i & 63)) & 1)) logits[i] = ninf;
    }
    for (std::size_t i = n; i < logits.size(); ++i) logits[i] = ninf;
  }

  /// Moves past token `t` (an end-of-generation token ends the stream's grammar).
  void accept(std::int32_t t) {
    if (c_->is_eos(t)) {
      done_ = true;
      return;
    }
    stack_set next;
    m_.advance(s_, c_->table().bytes(t), next);
    s_ = std::move(next);
  }

  bool accepting() const { return s_.accepting(); }
  bool done() const { return done_; }

 private:
  std::shared_ptr<constraint const> c_;
  matcher m_;
  stack_set s_;
  bool done_ = false;
};

}  // namespace tf::grammar
