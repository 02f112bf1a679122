#pragma once
/// tf::jinja lexer: template source -> tokens, applying {%- -%}, trim_blocks and lstrip_blocks.
#include <tf/error.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::jinja {

/// Where a token starts in the template source (1-based).
struct source_pos {
  int line = 1;
  int column = 1;
};

/// One token: raw text, tag delimiters, or an expression piece.
struct token {
  enum class kind {
    text,
    var_begin,
    var_end,
    block_begin,
    block_end,
    name,
    integer,
    floating,
    string,
    op,
    eof
  };
  kind type;
  std::string text;  // text, name, operator, or decoded string literal
  source_pos pos;
  std::int64_t int_value = 0;
  double float_value = 0.0;
};

/// Whitespace options; Hugging Face renders chat templates with both on.
struct lex_options {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

namespace detail {

class lexer {
 public:
  lexer(std::string_view src, lex_options opt) : src_(src), opt_(opt) {}

  std::vector<token> run() {
    // Jinja drops one trailing newline (keep_trailing_newline=False)
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
    while (i_ < src_.size()) {
      size_t start = find_tag(i_);
      std::string text(src_.substr(i_, start - i_));
      bool at_line_start = i_ == 0 || src_[i_ - 1] == '\n';
      if (start < src_.size()) {
        char kind = src_[start + 1];
        char mod = start + 2 < src_.size() ? src_[start + 2] : '\0';
        if (mod == '-') {
          rstrip_all(text);
        } else if (mod != '+' && opt_.lstrip_blocks && (kind == '%' || kind == '#')) {
          lstrip_line(text, at_line_start);
        }
      }
      if (strip_next_) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
        strip_next_ = false;
      }
      if (!text.empty()) push(token::kind::text, std::move(text), i_);
      if (start >= src_.size()) break;
      i_ = start;
      char kind = src_[i_ + 1];
      if (kind == '#') {
        lex_comment();
      } else if (kind == '{') {
        lex_tag(token::kind::var_begin, token::kind::var_end, '}');
      } else {
        lex_tag(token::kind::block_begin, token::kind::block_end, '%');
      }
    }
    push(token::kind::eof, "", src_.size());
    return std::move(out_);
  }

 private:
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  size_t find_tag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    return src_.size();
  }

  static void rstrip_all(std::string& t) {
    while (!t.empty() && is_space(t.back())) t.pop_back();
  }

  static void lstrip_line(std::string& t, bool at_line_start) {
    size_t nl = t.rfind('\n');
    size_t from = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !at_line_start) return;
    for (size_t k = from; k < t.size(); ++k)
      if (t[k] != ' ' && t[k] != '\t') return;
    t.erase(from);
  }

  // Line and column of byte `off`. Tokens come in order, so it walks on from the last answer
  // (linear in the template, not quadratic) and starts over only for an earlier offset.
  source_pos pos_of(size_t off) const {
    if (off < cache_off_) {
      cache_off_ = 0;
      cache_pos_ = source_pos{};
    }
    for (size_t k = cache_off_; k < off && k < src_.size(); ++k) {
      if (src_[k] == '\n') {
        ++cache_pos_.line;
        cache_pos_.column = 1;
      } else {
        ++cache_pos_.column;
      }
    }
    cache_off_ = std::max(cache_off_, std::min(off, src_.size()));
    return cache_pos_;
  }

  [[noreturn]] void fail(size_t off, std::string_view what) const {
    auto p = pos_of(off);
    throw tf::error("jinja: syntax error at line {}, column {}: {}", p.line, p.column, what);
  }

  void push(token::kind k, std::string text, size_t off) {
    out_.push_back(token{k, std::move(text), pos_of(off), 0, 0.0});
  }

  // After a closing delimiter: '-' strips all following whitespace, trim_blocks one newline.
  void after_close(bool minus, bool plus, bool is_block) {
    if (minus) {
      strip_next_ = true;
    } else if (is_block && opt_.trim_blocks && !plus && i_ < src_.size() && src_[i_] == '\n') {
      ++i_;
    }
  }

  void lex_comment() {
    size_t end = src_.find("#}", i_ + 2);
    if (end == std::string_view::npos) fail(i_, "unclosed comment '{#'");
    bool minus = end > i_ + 2 && src_[end - 1] == '-';
    bool plus = end > i_ + 2 && src_[end - 1] == '+';
    i_ = end + 2;
    after_close(minus, plus, true);
  }

  void lex_tag(token::kind begin, token::kind end, char close) {
    size_t tag_start = i_;
    push(begin, "", i_);
    i_ += 2;
    if (i_ < src_.size() && (src_[i_] == '-' || src_[i_] == '+')) ++i_;
    size_t first_tok = out_.size();
    int depth = 0;  // brackets open inside the tag: '}}' in `{'a': {}}` is not the end
    while (true) {
      while (i_ < src_.size() && is_space(src_[i_])) ++i_;
      if (i_ >= src_.size()) fail(tag_start, "unclosed tag");
      char c = src_[i_];
      bool minus_close = (c == '-' || c == '+') && i_ + 2 < src_.size() && src_[i_ + 1] == close &&
                         src_[i_ + 2] == '}';
      if (minus_close && depth == 0) {
        push(end, "", i_);
        i_ += 3;
        after_close(c == '-', c == '+', begin == token::kind::block_begin);
        break;
      }
      if (depth == 0 && c == close && i_ + 1 < src_.size() && src_[i_ + 1] == '}') {
        push(end, "", i_);
        i_ += 2;
        after_close(false, false, begin == token::kind::block_begin);
        break;
      }
      lex_expr_token();
      if (out_.back().type == token::kind::op) {
        const std::string& o = out_.back().text;
        if (o == "(" || o == "[" || o == "{") ++depth;
        if ((o == ")" || o == "]" || o == "}") && depth > 0) --depth;
      }
      // {% raw %}: everything up to {% endraw %} is text
      if (begin == token::kind::block_begin && out_.size() == first_tok + 1 &&
          out_.back().type == token::kind::name && out_.back().text == "raw") {
        lex_raw(tag_start, first_tok);
        return;
      }
    }
  }

  void lex_raw(size_t tag_start, size_t first_tok) {
    out_.resize(first_tok - 1);  // drop block_begin + 'raw'
    while (i_ < src_.size() && is_space(src_[i_])) ++i_;
    bool minus = false;
    if (i_ < src_.size() && src_[i_] == '-') {
      minus = true;
      ++i_;
    }
    if (i_ + 1 >= src_.size() || src_[i_] != '%' || src_[i_ + 1] != '}')
      fail(tag_start, "expected '%}' after 'raw'");
    i_ += 2;
    if (minus) {
      while (i_ < src_.size() && is_space(src_[i_])) ++i_;
    } else if (opt_.trim_blocks && i_ < src_.size() && src_[i_] == '\n') {
      ++i_;
    }
    size_t body = i_;
    for (size_t k = i_; k + 1 < src_.size(); ++k) {
      if (src_[k] != '{' || src_[k + 1] != '%') continue;
      size_t m = k + 2;
      bool lminus = m < src_.size() && src_[m] == '-';
      if (m < src_.size() && (src_[m] == '-' || src_[m] == '+')) ++m;
      while (m < src_.size() && is_space(src_[m])) ++m;
      if (src_.substr(m, 6) != "endraw") continue;
      m += 6;
      while (m < src_.size() && is_space(src_[m])) ++m;
      bool rminus = m < src_.size() && src_[m] == '-';
      if (m < src_.size() && (src_[m] == '-' || src_[m] == '+')) ++m;
      if (m + 1 >= src_.size() || src_[m] != '%' || src_[m + 1] != '}') continue;
      std::string text(src_.substr(body, k - body));
      if (lminus)
        rstrip_all(text);
      else if (opt_.lstrip_blocks)
        lstrip_line(text, body == 0 || src_[body - 1] == '\n');
      if (!text.empty()) push(token::kind::text, std::move(text), body);
      i_ = m + 2;
      after_close(rminus, false, true);
      return;
    }
    fail(tag_start, "missing {% endraw %}");
  }

  void lex_expr_token() {
    size_t s = i_;
    char c = src_[i_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (i_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[i_])) || src_[i_] == '_'))
        ++i_;
      push(token::kind::name, std::string(src_.substr(s, i_ - s)), s);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      bool is_float = false;
      while (i_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[i_])) || src_[i_] == '_'))
        ++i_;
      if (i_ + 1 < src_.size() && src_[i_] == '.' &&
          std::isdigit(static_cast<unsigned char>(src_[i_ + 1]))) {
        is_float = true;
        ++i_;
        while (i_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i_]))) ++i_;
      }
      if (i_ < src_.size() && (src_[i_] == 'e' || src_[i_] == 'E')) {
        size_t k = i_ + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
          is_float = true;
          i_ = k;
          while (i_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i_]))) ++i_;
        }
      }
      std::string num;
      for (char ch : src_.substr(s, i_ - s))
        if (ch != '_') num += ch;
      token t{is_float ? token::kind::floating : token::kind::integer, num, pos_of(s), 0, 0.0};
      try {
        if (is_float)
          t.float_value = std::stod(num);
        else
          t.int_value = std::stoll(num);
      } catch (const std::exception&) {
        fail(s, "number out of range");
      }
      out_.push_back(std::move(t));
      return;
    }
    if (c == '\'' || c == '"') {
      push(token::kind::string, lex_string(), s);
      return;
    }
    static constexpr std::string_view ops3[] = {"//", "**", "==", "!=", "<=", ">="};
    for (auto op : ops3) {
      if (src_.substr(i_, 2) == op) {
        i_ += 2;
        push(token::kind::op, std::string(op), s);
        return;
      }
    }
    if (std::string_view("+-*/%~<>=()[]{}.,:|").find(c) != std::string_view::npos) {
      ++i_;
      push(token::kind::op, std::string(1, c), s);
      return;
    }
    fail(s, std::string("unexpected character '") + c + "'");
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Python string-literal escapes, as Jinja decodes them.
  std::string lex_string() {
    size_t s = i_;
    char q = src_[i_++];
    std::string out;
    while (true) {
      if (i_ >= src_.size()) fail(s, "unterminated string literal");
      char c = src_[i_++];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= src_.size()) fail(s, "unterminated string literal");
      char e = src_[i_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '0':
          out += '\0';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i_ + n > src_.size()) fail(s, "truncated \\x/\\u escape");
          std::uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            char h = src_[i_ + k];
            int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                    : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                                : -1;
            if (d < 0) fail(s, "bad hex digit in escape");
            cp = cp * 16 + static_cast<std::uint32_t>(d);
          }
          if (cp > 0x10FFFF) fail(s, "escape beyond U+10FFFF");
          i_ += n;
          append_utf8(out, cp);
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    return out;
  }

  std::string_view src_;
  lex_options opt_;
  size_t i_ = 0;
  bool strip_next_ = false;
  std::vector<token> out_;
  mutable size_t cache_off_ = 0;
  mutable source_pos cache_pos_;
};

}  // namespace detail

/// Splits a template into tokens; throws tf::error with line/column on malformed input.
inline std::vector<token> tokenize(std::string_view src, lex_options opt = {}) {
  return detail::lexer(src, opt).run();
}

}  // namespace tf::jinja
