#pragma once
/// tf::tokenizer::stream_decoder: token ids in, whole UTF-8 characters out, for streamed replies.
#include <tf/tokenizer/detail/unicode.hpp>
#include <tf/tokenizer/tokenizer.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace tf::tokenizer {

/// Feeds token ids and returns only complete UTF-8 characters: a character split across
/// byte-fallback tokens is held back until its last byte arrives. Invalid bytes come out as
/// U+FFFD, so every returned string is valid UTF-8. Keeps a pointer to the tokenizer.
class stream_decoder {
 public:
  explicit stream_decoder(const tokenizer& tok, bool render_special = false)
      : tok_(&tok), render_special_(render_special) {}

  /// The characters completed by token `id` (often empty or one piece).
  std::string feed(std::int32_t id) {
    tok_->append_piece(id, render_special_, at_start_, pending_);
    return take(false);
  }

  /// What is still held (an unfinished character becomes U+FFFD); the decoder starts over.
  std::string flush() {
    std::string out = take(true);
    at_start_ = true;
    return out;
  }

  /// Bytes held back waiting for the rest of a character (at most 3).
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string take(bool final) {
    std::string out;
    std::size_t i = 0;
    while (i < pending_.size()) {
      const auto b = static_cast<unsigned char>(pending_[i]);
      if (b < 0x80) {
        out.push_back(static_cast<char>(b));
        ++i;
        continue;
      }
      const std::size_t n = detail::utf8_len(b);
      if (n > 1 && i + n > pending_.size() && !final && continuations_to_end(i + 1)) break;
      const auto d = detail::decode_utf8(pending_, i);
      if (d.cp == detail::replacement_cp && d.len == 1) {
        detail::append_utf8(out, detail::replacement_cp);
        ++i;
        continue;
      }
      out.append(pending_, i, d.len);
      i += d.len;
    }
    pending_.erase(0, i);
    return out;
  }

  bool continuations_to_end(std::size_t from) const {
    for (std::size_t k = from; k < pending_.size(); ++k) {
      if ((static_cast<unsigned char>(pending_[k]) & 0xC0) != 0x80) return false;
    }
    return true;
  }

  const tokenizer* tok_;
  bool render_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace tf::tokenizer
