#pragma once
/// Text-to-id lookup and the leftmost-longest special-token matcher, over a vocab's tokens.
#include <tf/tokenizer/vocab.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tf::tokenizer::detail {

/// Token text -> id; a text listed twice maps to its last id. Views point into the vocab.
using token_index = std::unordered_map<std::string_view, std::int32_t>;

inline token_index make_token_index(const vocab& v) {
  token_index index;
  index.reserve(v.size() * 2);
  for (std::size_t i = 0; i < v.size(); ++i) {
    index.insert_or_assign(std::string_view(v.tokens[i]), static_cast<std::int32_t>(i));
  }
  return index;
}

/// The id of the SentencePiece byte token "<0xNN>" for byte `b`, or -1.
inline std::int32_t byte_token_id(const token_index& index, unsigned char b) {
  constexpr std::string_view hex = "0123456789ABCDEF";
  const std::array<char, 6> text{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
  const auto it = index.find(std::string_view(text.data(), text.size()));
  return it == index.end() ? -1 : it->second;
}

/// A byte trie of token texts that finds the longest one starting at a position.
class special_trie {
 public:
  special_trie() : nodes_(1, -1) { first_.fill(false); }

  void insert(std::string_view text, std::int32_t id) {
    if (text.empty()) return;
    first_[static_cast<unsigned char>(text[0])] = true;
    std::uint32_t node = 0;
    for (const char c : text) {
      const auto key = edge(node, c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        it = edges_.emplace(key, static_cast<std::uint32_t>(nodes_.size())).first;
        nodes_.push_back(-1);
      }
      node = it->second;
    }
    nodes_[node] = id;
  }

  bool empty() const { return nodes_.size() == 1; }
  /// Whether some token text starts with this byte.
  bool may_start(char c) const { return first_[static_cast<unsigned char>(c)]; }

  /// The longest token matching at `pos`: {id, length}, or {-1, 0}.
  std::pair<std::int32_t, std::size_t> longest(std::string_view text, std::size_t pos) const {
    std::pair<std::int32_t, std::size_t> best{-1, 0};
    std::uint32_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
      const auto it = edges_.find(edge(node, text[i]));
      if (it == edges_.end()) break;
      node = it->second;
      if (nodes_[node] >= 0) best = {nodes_[node], i + 1 - pos};
    }
    return best;
  }

 private:
  static std::uint64_t edge(std::uint32_t node, char c) {
    return (std::uint64_t{node} << 8) | static_cast<unsigned char>(c);
  }

  std::vector<std::int32_t> nodes_;  // [n_nodes] token id ending at each node, or -1
  std::unordered_map<std::uint64_t, std::uint32_t> edges_;
  std::array<bool, 256> first_{};
};

}  // namespace tf::tokenizer::detail
