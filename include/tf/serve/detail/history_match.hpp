#pragma once
/// How a draft source finds, among the KV streams it keeps, the one to extend for a history: the
/// longest shared prefix, the least recently used one on a tie.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tf::serve::detail {

/// The number of leading tokens `a` and `b` share.
inline std::size_t common_prefix(std::span<std::int32_t const> a, std::span<std::int32_t const> b) {
  auto const n = std::min(a.size(), b.size());
  return static_cast<std::size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin()).first -
      a.begin());
}

/// The cache of `caches` (non-empty) whose tokens, `tokens_of(cache)`, share the longest prefix
/// with `h`; among equals, the one with the smallest `used`.
template <class Cache, class TokensOf>
Cache& closest(std::vector<Cache>& caches, std::span<std::int32_t const> h, TokensOf tokens_of) {
  Cache* best = &caches.front();
  std::size_t best_len = 0;
  for (auto& c : caches) {
    auto const n = common_prefix(tokens_of(c), h);
    if (n > best_len || (n == best_len && c.used < best->used)) {
      best = &c;
      best_len = n;
    }
  }
  return *best;
}

}  // namespace tf::serve::detail
