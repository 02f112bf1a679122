#pragma once
/// A byte-level context-free grammar (GBNF-like): rules of alternatives, each a sequence of byte
/// sets and rule references, flattened so a matcher's stack entry is one int (a position).
#include <tf/error.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::grammar {

/// A set of bytes.
struct byte_set {
  std::array<std::uint64_t, 4> bits{};
  void add(unsigned char b) { bits[b >> 6] |= std::uint64_t{1} << (b & 63); }
  void add_range(unsigned char lo, unsigned char hi) {
    for (unsigned c = lo; c <= hi; ++c) add(static_cast<unsigned char>(c));
  }
  bool has(unsigned char b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  static byte_set of(std::string_view bytes) {
    byte_set s;
    for (char c : bytes) s.add(static_cast<unsigned char>(c));
    return s;
  }
  static byte_set range(unsigned char lo, unsigned char hi) {
    byte_set s;
    s.add_range(lo, hi);
    return s;
  }
};

/// One element of an alternative: a byte from a set, another rule, or the alternative's end.
struct element {
  enum class kind : std::uint8_t { bytes, ref, end };
  kind k = kind::end;
  std::int32_t arg = 0;  // bytes: index into sets(); ref: the rule
};

using sequence = std::vector<element>;

/// The grammar: build with rule()/define(), then finish() flattens it; a matcher reads flat(),
/// starts() and sets(). Rules must not be left-recursive, and a repeated item must not be
/// nullable (the compilers here build only such grammars).
class grammar {
 public:
  /// A new rule with no alternatives yet (so a rule can refer to itself).
  std::int32_t rule() {
    alts_.emplace_back();
    return static_cast<std::int32_t>(alts_.size() - 1);
  }
  /// Adds alternatives to `r`.
  void define(std::int32_t r, std::vector<sequence> alts) {
    for (auto& a : alts) alts_.at(static_cast<std::size_t>(r)).push_back(std::move(a));
  }
  /// A new rule with `alts`.
  std::int32_t rule(std::vector<sequence> alts) {
    auto r = rule();
    define(r, std::move(alts));
    return r;
  }
  element bytes(byte_set const& s) {
    sets_.push_back(s);
    return {element::kind::bytes, static_cast<std::int32_t>(sets_.size() - 1)};
  }
  static element ref(std::int32_t r) { return {element::kind::ref, r}; }
  /// The bytes of `text`, one element each.
  sequence literal(std::string_view text) {
    sequence s;
    for (char c : text) s.push_back(bytes(byte_set::of(std::string_view(&c, 1))));
    return s;
  }
  /// A rule matching `s` or nothing.
  std::int32_t optional(sequence s) { return rule({std::move(s), {}}); }
  /// A rule matching `item` repeated min..max times (max < 0: unbounded); `item` not nullable.
  std::int32_t repeat(sequence const& item, std::int64_t min, std::int64_t max) {
    std::int32_t tail;
    if (max < 0) {
      tail = rule();
      auto a = item;
      a.push_back(ref(tail));
      define(tail, {a, {}});
    } else {
      tail = rule({{}});
      for (std::int64_t i = min; i < max; ++i) {
        auto a = item;
        a.push_back(ref(tail));
        tail = rule({a, {}});
      }
    }
    sequence s;
    for (std::int64_t i = 0; i < min; ++i) s.insert(s.end(), item.begin(), item.end());
    s.push_back(ref(tail));
    return rule({s});
  }

  void set_root(std::int32_t r) { root_ = r; }
  std::int32_t root() const { return root_; }

  /// Flattens the rules: every alternative's elements then an end element.
  void finish() {
    flat_.clear();
    starts_.assign(alts_.size(), {});
    for (std::size_t r = 0; r < alts_.size(); ++r) {
      if (alts_[r].empty()) throw error("tf: grammar rule {} has no alternatives", r);
      for (auto const& a : alts_[r]) {
        starts_[r].push_back(static_cast<std::int32_t>(flat_.size()));
        for (auto const& e : a) flat_.push_back(e);
        flat_.push_back({element::kind::end, 0});
      }
    }
  }

  std::vector<element> const& flat() const { return flat_; }
  std::vector<std::int32_t> const& starts(std::int32_t r) const {
    return starts_[static_cast<std::size_t>(r)];
  }
  byte_set const& set(std::int32_t i) const { return sets_[static_cast<std::size_t>(i)]; }
  std::size_t rules() const { return alts_.size(); }

 private:
  std::vector<std::vector<sequence>> alts_;
  std::vector<byte_set> sets_;
  std::vector<element> flat_;
  std::vector<std::vector<std::int32_t>> starts_;
  std::int32_t root_ = 0;
};

}  // namespace tf::grammar
