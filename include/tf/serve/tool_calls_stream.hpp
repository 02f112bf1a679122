#pragma once
/// A reply parsed as it streams: reasoning split off first, then tool calls cut out of the
/// content. Feeding a reply whole or piece by piece gives the same reasoning, content and calls.
#include <tf/serve/reasoning.hpp>
#include <tf/serve/tool_calls.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

/// What one feed produced.
struct reply_piece {
  std::string reasoning, content;
  std::vector<parsed_tool_call> calls;
};

/// Cuts <tool_call>...</tool_call> blocks out of content. A block that does not parse stays in
/// the content as written; whitespace around calls is dropped; text that may still become the
/// start tag is held back.
class tool_call_streamer {
 public:
  tool_call_streamer(tool_format f, nlohmann::ordered_json tools)
      : format_(f), tools_(std::move(tools)) {}

  void feed(std::string_view text, bool final, reply_piece& out) {
    buf_ += text;
    if (format_ == tool_format::none) {
      out.content += buf_;
      buf_.clear();
      return;
    }
    if (format_ == tool_format::generic_json) return feed_whole(final, out);
    auto const [open_tag, close_tag] = call_tags(format_);
    for (;;) {
      if (!inside_) {
        auto at = buf_.find(open_tag);
        if (at != std::string::npos) {
          auto before = std::string_view(buf_).substr(0, at);
          auto last = before.find_last_not_of(" \t\r\n");
          auto const cut = last == std::string_view::npos ? 0 : last + 1;
          emit_text(before.substr(0, cut), true, out);
          gap_ = before.substr(cut);  // dropped if a call follows, kept if the block is text
          buf_.erase(0, at + open_tag.size());
          inside_ = true;
          continue;
        }
        // Hold back a partial start tag and trailing whitespace (dropped if a call follows).
        std::size_t keep = final ? 0 : partial_tag_suffix(buf_, open_tag);
        if (!final) {
          auto body = std::string_view(buf_).substr(0, buf_.size() - keep);
          auto last = body.find_last_not_of(" \t\r\n");
          keep = buf_.size() - (last == std::string_view::npos ? 0 : last + 1);
        }
        emit_text(std::string_view(buf_).substr(0, buf_.size() - keep), final, out);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      auto end = buf_.find(close_tag);
      if (end == std::string::npos && !final) return;
      auto body = std::string_view(buf_).substr(0, end == std::string::npos ? buf_.size() : end);
      if (auto c = parse_tool_call(format_, body, tools_)) {
        out.calls.push_back(std::move(*c));
        ++calls_;
        text_since_call_ = false;
      } else {
        std::string raw = gap_ + std::string(open_tag) + std::string(body);
        if (end != std::string::npos) raw += close_tag;
        emit_text(raw, true, out);
      }
      buf_.erase(0, end == std::string::npos ? buf_.size() : end + close_tag.size());
      inside_ = false;
      if (buf_.empty() && !final) return;
    }
  }

  std::size_t calls() const { return calls_; }

 private:
  // The generic fallback's reply is one JSON object, parsed once it is whole: a call, a
  // {"response": text} answer (content), or, when neither, the text as written.
  void feed_whole(bool final, reply_piece& out) {
    if (!final) return;
    if (auto c = parse_tool_call(format_, buf_, tools_)) {
      out.calls.push_back(std::move(*c));
      ++calls_;
    } else {
      auto v = nlohmann::ordered_json::parse(buf_, nullptr, false);
      bool const answer = !v.is_discarded() && v.is_object() && v.contains("response");
      out.content += answer ? (v["response"].is_string() ? v["response"].get<std::string>()
                                                         : detail::json_text(v["response"]))
                            : buf_;
    }
    buf_.clear();
  }

  // Content text; whitespace-only text next to a call is dropped (`settled`: nothing may follow
  // it without a call or the end in between).
  void emit_text(std::string_view s, bool settled, reply_piece& out) {
    if (s.empty()) return;
    bool const blank = s.find_first_not_of(" \t\r\n") == std::string_view::npos;
    if (blank && settled && ((calls_ > 0 && !text_since_call_) || !sent_)) return;
    if (calls_ > 0 && !sent_) s = s.substr(s.find_first_not_of(" \t\r\n"));
    out.content += s;
    sent_ = true;
    text_since_call_ = true;
  }

  tool_format format_;
  nlohmann::ordered_json tools_;
  std::string buf_, gap_;
  bool inside_ = false, sent_ = false;
  bool text_since_call_ = false;  // content went out after the last call (its whitespace stays)
  std::size_t calls_ = 0;
};

/// A reply's parser: reasoning split, then tool calls.
class reply_parser {
 public:
  reply_parser() : reply_parser(false, false, tool_format::none, {}) {}
  /// `open` and `close` are the template's reasoning tags (chat_format.hpp's table).
  reply_parser(bool think, bool starts_inside, tool_format f, nlohmann::ordered_json tools,
               std::string open = "<think>", std::string close = "</think>")
      : think_(think, starts_inside, std::move(open), std::move(close)),
        calls_(f, std::move(tools)) {}

  reply_piece feed(std::string_view text, bool final) {
    auto r = think_.feed(text, final);
    reply_piece out;
    out.reasoning = std::move(r.reasoning);
    calls_.feed(r.content, final, out);
    return out;
  }

 private:
  reasoning_splitter think_;
  tool_call_streamer calls_;
};

}  // namespace tf::serve
