#pragma once
/// Byte-level BPE (GGUF "gpt2"; GPT-2, Qwen, GLM): each byte maps to a printable code point, then
/// the adjacent pair with the lowest merge rank merges, leftmost first.
#include <tf/error.hpp>
#include <tf/tokenizer/detail/token_index.hpp>
#include <tf/tokenizer/detail/unicode.hpp>
#include <tf/tokenizer/vocab.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tf::tokenizer {

/// The merge table of a byte-level BPE vocab and the merge loop over one pre-token.
class bpe_model {
 public:
  bpe_model(const vocab& v, const detail::token_index& index) {
    for (std::size_t b = 0; b < 256; ++b) {
      const auto it = index.find(detail::byte_to_utf8()[b]);
      byte_ids_[b] = it == index.end() ? -1 : it->second;
    }
    merges_.reserve(v.merges.size() * 2);
    for (std::size_t rank = 0; rank < v.merges.size(); ++rank) {
      const std::string_view m = v.merges[rank];
      const std::size_t sep = m.find(' ', 1);
      if (sep == std::string_view::npos) {
        throw tf::error("tokenizer: merge {} '{}' has no space between its two parts", rank, m);
      }
      const auto a = index.find(m.substr(0, sep));
      const auto b = index.find(m.substr(sep + 1));
      const auto ab = index.find(std::string(m.substr(0, sep)) + std::string(m.substr(sep + 1)));
      // A merge whose parts or result are not tokens can never apply.
      if (a == index.end() || b == index.end() || ab == index.end()) continue;
      merges_.try_emplace(pair_key(a->second, b->second),
                          merge{static_cast<std::int32_t>(rank), ab->second});
    }
  }

  /// Appends the ids of one pre-token (raw bytes) to `out`.
  void encode(std::string_view word, std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    std::vector<symbol> syms(word.size());
    for (std::size_t i = 0; i < word.size(); ++i) {
      const auto b = static_cast<unsigned char>(word[i]);
      if (byte_ids_[b] < 0) {
        throw tf::error("tokenizer: byte 0x{:02X} has no token in this byte-level vocab", b);
      }
      const auto k = static_cast<std::int32_t>(i);
      syms[i] = {byte_ids_[b], k - 1, i + 1 < word.size() ? k + 1 : -1, true};
    }
    merge_all(syms);
    for (std::int32_t i = 0; i != -1; i = syms[static_cast<std::size_t>(i)].next) {
      out.push_back(syms[static_cast<std::size_t>(i)].id);
    }
  }

  /// Appends the ids of one word of a "gemma4" vocab (`model_kind::spm_bpe`): symbols start as
  /// UTF-8 characters (a lead byte's length, as llama.cpp cuts them) rather than bytes, merges by
  /// rank as above, and a symbol that is no token falls back to its bytes' <0xNN> tokens.
  void encode_chars(std::string_view word, const detail::token_index& index,
                    std::vector<std::int32_t>& out) const {
    if (word.empty()) return;
    std::vector<symbol> syms;
    std::vector<std::string_view> texts;  // [symbols] each first symbol's text, for the fallback
    for (std::size_t i = 0; i < word.size();) {
      static constexpr std::array<std::uint8_t, 16> lead_len{1, 1, 1, 1, 1, 1, 1, 1,
                                                             1, 1, 1, 1, 2, 2, 3, 4};
      const std::size_t n = std::min<std::size_t>(
          word.size() - i, lead_len[static_cast<unsigned char>(word[i]) >> 4]);
      const auto it = index.find(word.substr(i, n));
      const auto k = static_cast<std::int32_t>(syms.size());
      syms.push_back({it == index.end() ? -1 : it->second, k - 1, k + 1, true});
      texts.push_back(word.substr(i, n));
      i += n;
    }
    syms.back().next = -1;
    merge_all(syms);
    for (std::int32_t i = 0; i != -1; i = syms[static_cast<std::size_t>(i)].next) {
      const auto& sym = syms[static_cast<std::size_t>(i)];
      if (sym.id >= 0) {
        out.push_back(sym.id);
        continue;
      }
      for (const char c : texts[static_cast<std::size_t>(i)]) {
        const std::int32_t b = detail::byte_token_id(index, static_cast<unsigned char>(c));
        if (b >= 0) out.push_back(b);  // llama.cpp drops a byte without a token too
      }
    }
  }

  /// The number of merges that apply (parts and result are tokens).
  std::size_t merge_count() const { return merges_.size(); }

 private:
  struct merge {
    std::int32_t rank;
    std::int32_t id;
  };
  struct symbol {
    std::int32_t id;
    std::int32_t prev;
    std::int32_t next;
    bool alive;
  };
  struct candidate {
    std::int32_t rank;
    std::int32_t left;
    std::int32_t left_id;
    std::int32_t right_id;
    // The heap's top is the lowest rank, then the leftmost pair.
    bool operator<(const candidate& o) const {
      return rank > o.rank || (rank == o.rank && left > o.left);
    }
  };

  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (std::uint64_t{static_cast<std::uint32_t>(a)} << 32) | static_cast<std::uint32_t>(b);
  }

  // Applies merges to the linked symbols, the lowest rank first, leftmost on a tie.
  void merge_all(std::vector<symbol>& syms) const {
    if (syms.size() < 2) return;
    std::vector<candidate> heap;
    heap.reserve(syms.size());
    auto try_add = [&](std::int32_t left) {
      if (left < 0) return;
      const auto& l = syms[static_cast<std::size_t>(left)];
      if (l.next < 0) return;
      const auto& r = syms[static_cast<std::size_t>(l.next)];
      const auto it = merges_.find(pair_key(l.id, r.id));
      if (it == merges_.end()) return;
      heap.push_back({it->second.rank, left, l.id, r.id});
      std::push_heap(heap.begin(), heap.end());
    };
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) try_add(static_cast<std::int32_t>(i));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const candidate top = heap.back();
      heap.pop_back();
      auto& l = syms[static_cast<std::size_t>(top.left)];
      // Stale when either side has changed since the pair was queued.
      if (!l.alive || l.next < 0 || l.id != top.left_id) continue;
      auto& r = syms[static_cast<std::size_t>(l.next)];
      if (r.id != top.right_id) continue;
      l.id = merges_.at(pair_key(l.id, r.id)).id;
      r.alive = false;
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<std::size_t>(r.next)].prev = top.left;
      try_add(l.prev);
      try_add(top.left);
    }
  }

  std::array<std::int32_t, 256> byte_ids_{};
  std::unordered_map<std::uint64_t, merge> merges_;
};

}  // namespace tf::tokenizer
