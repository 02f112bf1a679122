#pragma once
/// Reasoning split: a reply's `<think>...</think>` part goes to `reasoning_content`, the rest to
/// `content`, piece by piece as text streams in (a tag split across pieces is held back).
#include <cstddef>
#include <string>
#include <string_view>

namespace tf::serve {

/// The longest suffix of `text` that is a proper prefix of `tag` (bytes to hold back).
inline std::size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

/// One step's output of a splitter: text for reasoning_content and for content.
struct reasoning_piece {
  std::string reasoning, content;
};

/// Splits a reply into reasoning and content. A reply thinks when it opens with `open` (after
/// whitespace) or when the prompt already opened it (`starts_inside`); everything up to `close`
/// is reasoning (without the newlines next to the tags), newlines right after `close` are dropped,
/// and the rest is content. A reply that ends still thinking (cut by max_tokens) is all reasoning.
class reasoning_splitter {
 public:
  reasoning_splitter(bool enabled, bool starts_inside, std::string open = "<think>",
                     std::string close = "</think>")
      : open_(std::move(open)), close_(std::move(close)) {
    state_ = !enabled ? state::content : starts_inside ? state::thinking : state::start;
  }

  /// Feeds the next text; `final` flushes what is held back.
  reasoning_piece feed(std::string_view text, bool final) {
    buf_ += text;
    reasoning_piece out;
    for (bool again = true; again;) {
      again = false;
      switch (state_) {
        case state::start: {
          auto const lead = buf_.find_first_not_of(" \t\r\n");
          if (lead == std::string::npos) {
            if (final) move_content(out, buf_.size());
            break;
          }
          auto rest = std::string_view(buf_).substr(lead);
          if (rest.starts_with(open_)) {
            buf_.erase(0, lead + open_.size());
            state_ = state::thinking;
            again = true;
          } else if (!final && open_.starts_with(rest)) {
            break;  // may still become the open tag
          } else {
            state_ = state::content;
            again = true;
          }
          break;
        }
        case state::thinking: {
          // Newlines right after the open tag and right before the close tag are the format's.
          if (!began_) {
            auto lead = buf_.find_first_not_of('\n');
            buf_.erase(0, lead == std::string::npos ? buf_.size() : lead);
            began_ = !buf_.empty();
          }
          auto at = buf_.find(close_);
          if (at != std::string::npos) {
            auto body = std::string_view(buf_).substr(0, at);
            auto last = body.find_last_not_of('\n');
            out.reasoning += body.substr(0, last == std::string_view::npos ? 0 : last + 1);
            buf_.erase(0, at + close_.size());
            state_ = state::after_close;
            again = true;
            break;
          }
          auto keep = final ? 0 : partial_tag_suffix(buf_, close_);
          auto body = std::string_view(buf_).substr(0, buf_.size() - keep);
          auto last = body.find_last_not_of('\n');
          auto ready = last == std::string_view::npos ? 0 : last + 1;
          out.reasoning += body.substr(0, ready);
          buf_.erase(0, final ? buf_.size() : ready);
          break;
        }
        case state::after_close: {
          auto lead = buf_.find_first_not_of('\n');
          if (lead == std::string::npos) {
            buf_.clear();
            break;
          }
          buf_.erase(0, lead);
          state_ = state::content;
          again = true;
          break;
        }
        case state::content:
          move_content(out, buf_.size());
          break;
      }
    }
    return out;
  }

  /// Whether the reply has thought (opened a reasoning part).
  bool thinking_now() const { return state_ == state::thinking; }

 private:
  enum class state { start, thinking, after_close, content };
  void move_content(reasoning_piece& out, std::size_t n) {
    out.content += buf_.substr(0, n);
    buf_.erase(0, n);
  }

  std::string open_, close_, buf_;
  state state_;
  bool began_ = false;  // reasoning text has started (leading newlines dropped)
};

/// Whether a rendered prompt leaves the reply inside a thinking part: its last `open` comes after
/// its last `close` (e.g. Qwen3.5's generation prompt ends with "<think>\n").
inline bool prompt_opens_thinking(std::string_view prompt_tail, std::string_view open = "<think>",
                                  std::string_view close = "</think>") {
  auto o = prompt_tail.rfind(open);
  if (o == std::string_view::npos) return false;
  auto c = prompt_tail.rfind(close);
  return c == std::string_view::npos || c < o;
}

}  // namespace tf::serve
