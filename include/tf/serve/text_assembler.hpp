#pragma once
/// Generated text for a reply: token bytes joined, stop strings applied, and bytes held back that
/// may still become a stop string or an unfinished UTF-8 character.
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

/// Length of the longest prefix of `s` that ends on a whole UTF-8 character.
inline std::size_t utf8_complete_prefix(std::string_view s) {
  std::size_t n = s.size();
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    std::size_t len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 1;
    return len > back ? n - back : n;
  }
  return n;
}

/// Turns generated tokens into text, applying stop strings and holding back bytes that may
/// still become a stop string or an unfinished UTF-8 character.
class text_assembler {
 public:
  explicit text_assembler(std::vector<std::string> stop) : stop_(std::move(stop)) {
    for (auto const& s : stop_) hold_ = std::max(hold_, s.size() - 1);
  }
  /// Adds a token's bytes; returns true when a stop string has appeared (text cut before it).
  bool add(std::string const& piece) {
    auto from = text_.size() > hold_ + 0 ? text_.size() - hold_ : 0;
    text_ += piece;
    for (auto const& s : stop_) {
      auto at = text_.find(s, from > s.size() ? from - s.size() : 0);
      if (at != std::string::npos) {
        text_.resize(at);
        stopped_ = true;
      }
    }
    return stopped_;
  }
  /// Text safe to send now (all of it once `final`).
  std::string take(bool final) {
    std::size_t ready = text_.size();
    if (!final && !stopped_) ready = ready > hold_ ? ready - hold_ : 0;
    ready = utf8_complete_prefix(std::string_view(text_).substr(0, ready));
    if (final && ready < text_.size()) ready = text_.size();
    if (ready <= sent_) return {};
    auto out = text_.substr(sent_, ready - sent_);
    sent_ = ready;
    return out;
  }
  std::string const& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  std::size_t hold_ = 0;
  std::string text_;
  std::size_t sent_ = 0;
  bool stopped_ = false;
};

}  // namespace tf::serve
