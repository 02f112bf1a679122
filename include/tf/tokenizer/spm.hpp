#pragma once
/// SentencePiece-style BPE (GGUF "llama"): merge the adjacent pair whose joined text is the
/// highest-scoring token, leftmost first; characters no token covers fall back to <0xNN> bytes.
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
#include <vector>

namespace tf::tokenizer {

/// The SentencePiece merge loop over one fragment of text (spaces already escaped as U+2581).
class spm_model {
 public:
  spm_model(const vocab& v, const detail::token_index& index) : vocab_(&v), index_(&index) {
    byte_ids_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const auto it = index.find(fmt::format("<0x{:02X}>", b));
      if (it != index.end()) byte_ids_[static_cast<std::size_t>(b)] = it->second;
    }
  }

  /// The id of the <0xNN> token for a byte, or -1.
  std::int32_t byte_id(unsigned char b) const { return byte_ids_[b]; }

  /// Appends the ids of `text` to `out`.
  void encode(std::string_view text, std::vector<std::int32_t>& out) const {
    if (text.empty()) return;
    std::vector<symbol> syms;
    syms.reserve(text.size());
    for (std::size_t off = 0; off < text.size();) {
      const std::size_t len =
          std::min(text.size() - off, detail::utf8_len(static_cast<unsigned char>(text[off])));
      const auto i = static_cast<std::int32_t>(syms.size());
      syms.push_back({static_cast<std::uint32_t>(off), static_cast<std::uint32_t>(len), i - 1,
                      off + len < text.size() ? i + 1 : -1});
      off += len;
    }
    std::vector<bigram> heap;
    heap.reserve(syms.size());
    auto try_add = [&](std::int32_t left, std::int32_t right) {
      if (left < 0 || right < 0) return;
      const auto& l = syms[static_cast<std::size_t>(left)];
      const auto& r = syms[static_cast<std::size_t>(right)];
      const auto it = index_->find(text.substr(l.off, l.len + r.len));
      if (it == index_->end()) return;
      heap.push_back({vocab_->score(it->second), left, right, l.len + r.len});
      std::push_heap(heap.begin(), heap.end());
    };
    for (std::size_t i = 1; i < syms.size(); ++i) {
      try_add(static_cast<std::int32_t>(i - 1), static_cast<std::int32_t>(i));
    }
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end());
      const bigram top = heap.back();
      heap.pop_back();
      auto& l = syms[static_cast<std::size_t>(top.left)];
      auto& r = syms[static_cast<std::size_t>(top.right)];
      // A pair is stale once either side has merged with something else.
      if (l.len == 0 || r.len == 0 || l.len + r.len != top.size) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[static_cast<std::size_t>(r.next)].prev = top.left;
      try_add(l.prev, top.left);
      try_add(top.left, l.next);
    }
    for (std::int32_t i = 0; i != -1; i = syms[static_cast<std::size_t>(i)].next) {
      const auto& s = syms[static_cast<std::size_t>(i)];
      const std::string_view piece = text.substr(s.off, s.len);
      const auto it = index_->find(piece);
      if (it != index_->end()) {
        out.push_back(it->second);
        continue;
      }
      for (const char c : piece) out.push_back(byte_fallback(static_cast<unsigned char>(c)));
    }
  }

 private:
  struct symbol {
    std::uint32_t off;
    std::uint32_t len;  // 0 once merged into its left neighbour
    std::int32_t prev;
    std::int32_t next;
  };
  struct bigram {
    float score;
    std::int32_t left;
    std::int32_t right;
    std::uint32_t size;
    // The heap's top is the highest score, then the leftmost pair.
    bool operator<(const bigram& o) const {
      return score < o.score || (score == o.score && left > o.left);
    }
  };

  std::int32_t byte_fallback(unsigned char b) const {
    if (byte_ids_[b] >= 0) return byte_ids_[b];
    if (vocab_->unk >= 0) return vocab_->unk;
    throw tf::error("tokenizer: byte 0x{:02X} has no <0x{:02X}> token and the vocab has no unk", b,
                    b);
  }

  const vocab* vocab_;
  const detail::token_index* index_;
  std::array<std::int32_t, 256> byte_ids_{};
};

}  // namespace tf::tokenizer
