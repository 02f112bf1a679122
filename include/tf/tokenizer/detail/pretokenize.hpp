#pragma once
/// Byte-level BPE pre-tokenizers: the GPT-2, Qwen2, Qwen3.5 and GLM-4 / Llama 3 split regexes as
/// hand-written scanners over code points (std::regex has no \p{L} and is far too slow).
#include <tf/tokenizer/detail/unicode.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tf::tokenizer::detail {

/// Which split regex a byte-level BPE vocab was trained with.
enum class pre_style : std::uint8_t {
  /// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  gpt2,
  /// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  /// \s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,
  /// As qwen2 but \p{N}{1,3} (the cl100k / Llama 3 form).
  glm4,
  /// As qwen2 with combining marks in words and out of punctuation runs:
  /// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
  /// ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen35,
};

/// A byte span [begin, end) of the input.
struct span {
  std::size_t begin;
  std::size_t end;
};

class pre_scanner {
 public:
  pre_scanner(std::string_view text, pre_style style) : style_(style) {
    cps_.reserve(text.size());
    offs_.reserve(text.size() + 1);
    for (std::size_t pos = 0; pos < text.size();) {
      const auto d = decode_utf8(text, pos);
      cps_.push_back(d.cp);
      offs_.push_back(pos);
      pos += d.len;
    }
    offs_.push_back(text.size());
    cls_.resize(cps_.size());
    const bool marks = style == pre_style::qwen35;
    for (std::size_t i = 0; i < cps_.size(); ++i) cls_[i] = classify(cps_[i], marks);
  }

  /// Appends the pieces of the whole text to `out`, in order; they tile the input exactly.
  void split(std::vector<span>& out) const {
    const std::size_t n = cps_.size();
    for (std::size_t i = 0; i < n;) {
      const std::size_t j = match_at(i);
      out.push_back({offs_[i], offs_[j]});
      i = j;
    }
  }

 private:
  /// `mark` (\p{M}) only where the regex names it (qwen35); elsewhere a mark is `other`.
  enum cls : std::uint8_t { letter, mark, number, space, other };

  static cls classify(char32_t cp, bool marks) {
    if (is_letter(cp)) return letter;
    if (marks && is_mark(cp)) return mark;
    if (is_number(cp)) return number;
    if (is_whitespace(cp)) return space;
    return other;
  }

  bool is(std::size_t i, cls c) const { return i < cls_.size() && cls_[i] == c; }
  bool is_cp(std::size_t i, char32_t cp) const { return i < cps_.size() && cps_[i] == cp; }
  bool is_newline(std::size_t i) const { return is_cp(i, '\r') || is_cp(i, '\n'); }
  std::size_t run(std::size_t i, cls c) const {
    while (is(i, c)) ++i;
    return i;
  }
  /// [\p{L}\p{M}] (just \p{L} where marks are `other`).
  bool is_word(std::size_t i) const { return is(i, letter) || is(i, mark); }
  std::size_t word_run(std::size_t i) const {
    while (is_word(i)) ++i;
    return i;
  }

  /// 's 't 're 've 'm 'll 'd, case-insensitively for Qwen2/GLM-4; returns the end or 0.
  std::size_t contraction(std::size_t i) const {
    if (!is_cp(i, '\'') || i + 1 >= cps_.size()) return 0;
    const bool fold = style_ != pre_style::gpt2;
    auto low = [&](std::size_t k) -> char32_t {
      if (k >= cps_.size()) return 0;
      const char32_t c = cps_[k];
      return fold && c >= 'A' && c <= 'Z' ? c + 32 : c;
    };
    const char32_t a = low(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    const char32_t b = low(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }

  /// \s+(?!\S) then \s+: a whitespace run, leaving its last space to a following word.
  std::size_t whitespace(std::size_t i) const {
    const std::size_t j = run(i, space);
    if (j == cps_.size() || j - i == 1) return j;
    return j - 1;
  }

  std::size_t match_at(std::size_t i) const {
    if (const std::size_t c = contraction(i)) return c;
    if (style_ == pre_style::gpt2) return match_gpt2(i);
    return match_qwen2(i);
  }

  std::size_t match_gpt2(std::size_t i) const {
    const std::size_t k = is_cp(i, ' ') && i + 1 < cps_.size() && !is(i + 1, space) ? i + 1 : i;
    if (is(k, letter)) return run(k, letter);
    if (is(k, number)) return run(k, number);
    if (is(k, other)) return run(k, other);
    return whitespace(i);
  }

  /// qwen2, glm4 and qwen35: they differ only in the digit group and in marks (see cls).
  std::size_t match_qwen2(std::size_t i) const {
    // [^\r\n\p{L}\p{N}]?\p{L}+ ([\p{L}\p{M}]+ for qwen35; a mark at i is a word start either way)
    if (is_word(i)) return word_run(i);
    if (!is(i, number) && !is_newline(i) && is_word(i + 1)) return word_run(i + 1);
    // \p{N} or \p{N}{1,3}
    if (is(i, number)) {
      const std::size_t max = style_ == pre_style::glm4 ? 3 : 1;
      std::size_t j = i;
      while (j - i < max && is(j, number)) ++j;
      return j;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (and not \p{M} for qwen35)
    const std::size_t k = is_cp(i, ' ') && is(i + 1, other) ? i + 1 : i;
    if (is(k, other)) {
      std::size_t j = run(k, other);
      while (is_newline(j)) ++j;
      return j;
    }
    // \s*[\r\n]+: up to the last newline of the whitespace run.
    const std::size_t j = run(i, space);
    for (std::size_t e = j; e > i; --e) {
      if (is_newline(e - 1)) return e;
    }
    return whitespace(i);
  }

  pre_style style_;
  std::vector<char32_t> cps_;      // [n] code points
  std::vector<std::size_t> offs_;  // [n + 1] byte offset of each code point
  std::vector<cls> cls_;           // [n]
};

/// Splits `text` into pre-tokens under `style`.
inline std::vector<span> pre_tokenize(std::string_view text, pre_style style) {
  std::vector<span> out;
  pre_scanner(text, style).split(out);
  return out;
}

}  // namespace tf::tokenizer::detail
