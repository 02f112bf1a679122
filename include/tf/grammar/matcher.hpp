#pragma once
/// The grammar's pushdown state: a set of stacks of flat positions (each top waits on a byte
/// set; an empty stack means the root is complete), advanced a byte at a time.
#include <tf/grammar/grammar.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf::grammar {

/// A set of stacks, stored end to end; stack i is data[ends[i-1], ends[i]), its top last.
struct stack_set {
  std::vector<std::int32_t> data;
  std::vector<std::uint32_t> ends;

  std::size_t size() const { return ends.size(); }
  bool empty() const { return ends.empty(); }
  void clear() {
    data.clear();
    ends.clear();
  }
  std::span<std::int32_t const> at(std::size_t i) const {
    std::size_t const b = i == 0 ? 0 : ends[i - 1];
    return {data.data() + b, ends[i] - b};
  }
  /// Adds `s` unless an equal stack is already in the set.
  void add(std::span<std::int32_t const> s) {
    for (std::size_t i = 0; i < size(); ++i)
      if (std::ranges::equal(at(i), s)) return;
    data.insert(data.end(), s.begin(), s.end());
    ends.push_back(static_cast<std::uint32_t>(data.size()));
  }
  /// Whether the root can be complete here.
  bool accepting() const {
    for (std::size_t i = 0; i < size(); ++i)
      if (at(i).empty()) return true;
    return false;
  }
  /// The set as bytes, a cache key (the order is the deterministic order of advance()).
  std::string key() const {
    std::string k(reinterpret_cast<char const*>(ends.data()), ends.size() * sizeof(ends[0]));
    k.push_back('|');
    k.append(reinterpret_cast<char const*>(data.data()), data.size() * sizeof(data[0]));
    return k;
  }
};

/// Advances stack sets over one grammar (finished); holds scratch space, so one per thread.
class matcher {
 public:
  explicit matcher(grammar const& g) : g_(&g) {}

  /// The stacks before any byte.
  stack_set initial() {
    stack_set out;
    for (auto a : g_->starts(g_->root())) {
      tmp_.assign(1, a);
      expand(out);
    }
    return out;
  }

  /// `in` after byte `b` into `out` (empty: `b` is not allowed here).
  void advance(stack_set const& in, unsigned char b, stack_set& out) {
    out.clear();
    auto const& flat = g_->flat();
    for (std::size_t i = 0; i < in.size(); ++i) {
      auto s = in.at(i);
      if (s.empty()) continue;
      auto const& e = flat[static_cast<std::size_t>(s.back())];
      if (!g_->set(e.arg).has(b)) continue;
      tmp_.assign(s.begin(), s.end());
      tmp_.back() += 1;
      expand(out);
    }
  }

  /// `in` after `bytes`; false (and `out` empty) when a byte is refused.
  bool advance(stack_set const& in, std::string_view bytes, stack_set& out) {
    out = in;
    stack_set next;
    for (char c : bytes) {
      advance(out, static_cast<unsigned char>(c), next);
      std::swap(out, next);
      if (out.empty()) return false;
    }
    return true;
  }

  /// Whether `text` is a whole sentence of the grammar.
  bool matches(std::string_view text) {
    stack_set s;
    return advance(initial(), text, s) && s.accepting();
  }

 private:
  // Expands tmp_ until its top waits on a byte set (or it is empty), adding each to `out`.
  void expand(stack_set& out) {
    if (tmp_.empty()) {
      out.add(tmp_);
      return;
    }
    auto const pos = tmp_.back();
    auto const& flat = g_->flat();
    auto const& e = flat[static_cast<std::size_t>(pos)];
    if (e.k == element::kind::bytes) {
      out.add(tmp_);
      return;
    }
    tmp_.pop_back();
    if (e.k == element::kind::end) {
      expand(out);
    } else {
      bool const last = flat[static_cast<std::size_t>(pos) + 1].k == element::kind::end;
      if (!last) tmp_.push_back(pos + 1);
      for (auto a : g_->starts(e.arg)) {
        tmp_.push_back(a);
        expand(out);
        tmp_.pop_back();
      }
      if (!last) tmp_.pop_back();
    }
    tmp_.push_back(pos);
  }

  grammar const* g_;
  std::vector<std::int32_t> tmp_;
};

}  // namespace tf::grammar
