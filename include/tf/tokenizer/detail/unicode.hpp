#pragma once
/// UTF-8 decoding, Unicode letter/number/mark/whitespace classes and the GPT-2 byte-to-unicode map.
#include <tf/tokenizer/detail/unicode_tables.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tf::tokenizer::detail {

/// The length of the UTF-8 sequence a lead byte starts (1 for continuation/invalid bytes).
inline constexpr std::size_t utf8_len(unsigned char lead) {
  constexpr std::array<std::uint8_t, 16> by_high_nibble{1, 1, 1, 1, 1, 1, 1, 1,
                                                        1, 1, 1, 1, 2, 2, 3, 4};
  return by_high_nibble[lead >> 4];
}

/// One decoded code point and how many bytes it took.
struct decoded_cp {
  char32_t cp;
  std::size_t len;
};

inline constexpr char32_t replacement_cp = 0xFFFD;

/// Decodes the code point at `pos`; an invalid or truncated sequence decodes as U+FFFD, 1 byte.
inline decoded_cp decode_utf8(std::string_view s, std::size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {b0, 1};
  const std::size_t n = utf8_len(b0);
  // 0xF8..0xFF lead no sequence (utf8_len's table gives them 4, as llama.cpp's does for
  // splitting): without this, F8-FF + 3 continuation bytes decoded as a code point and the
  // "valid" bytes were copied out as they are, invalid UTF-8 (found by fuzz/targets/tokenizer).
  if (n == 1 || b0 >= 0xF8 || pos + n > s.size()) return {replacement_cp, 1};
  char32_t cp = b0 & (0xFF >> (n + 1));
  for (std::size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return {replacement_cp, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not characters.
  constexpr std::array<char32_t, 5> min_cp{0, 0, 0x80, 0x800, 0x10000};
  if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return {replacement_cp, 1};
  }
  return {cp, n};
}

/// Appends the UTF-8 encoding of `cp` to `out`.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

template <std::size_t N>
inline bool in_ranges(const std::array<cp_range, N>& ranges, char32_t cp) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                   [](char32_t c, const cp_range& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

/// \p{L}: any letter.
inline bool is_letter(char32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(letter_ranges, cp);
}

/// \p{N}: any number.
inline bool is_number(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(number_ranges, cp);
}

/// \p{M}: any mark (combining accents, vowel signs, variation selectors).
inline bool is_mark(char32_t cp) {
  return cp >= 0x300 && in_ranges(mark_ranges, cp);
}

/// \s: Unicode White_Space.
inline constexpr bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

/// GPT-2's reversible map from each byte to a printable code point.
inline const std::array<char32_t, 256>& byte_to_cp() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

/// The inverse of byte_to_cp over code points below 324; -1 where no byte maps there.
inline const std::array<std::int16_t, 324>& cp_to_byte() {
  static const std::array<std::int16_t, 324> table = [] {
    std::array<std::int16_t, 324> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_cp()[static_cast<std::size_t>(b)]] = std::int16_t(b);
    return t;
  }();
  return table;
}

/// The UTF-8 text of each byte under the GPT-2 map.
inline const std::array<std::string, 256>& byte_to_utf8() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (std::size_t b = 0; b < 256; ++b) append_utf8(t[b], byte_to_cp()[b]);
    return t;
  }();
  return table;
}

}  // namespace tf::tokenizer::detail
