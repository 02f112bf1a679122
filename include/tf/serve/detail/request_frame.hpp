#pragma once
/// Where an HTTP/1.1 request ends in the bytes received so far, so the connection gate can wait
/// for a whole request without a thread: the header block, then a Content-Length or chunked body.
/// It only frames; httplib parses and judges the request once it has arrived.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tf::serve::detail {

enum class frame_state {
  incomplete,    // more bytes are needed
  complete,      // a whole request: `end` bytes
  headers_only,  // the header block is whole; the body is for the reader to read (see frame)
  too_large,     // the header block passed `max_header_bytes` without ending
};

struct frame {
  frame_state state = frame_state::incomplete;
  std::size_t end = 0;  // complete: the request's length; headers_only: the header block's
};

inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// The end of a chunked body that starts at `pos`: 0 while incomplete, npos when malformed.
inline std::size_t chunked_end(std::string_view b, std::size_t pos) {
  constexpr auto npos = std::string_view::npos;
  for (;;) {
    auto const eol = b.find("\r\n", pos);
    if (eol == npos) return b.size() - pos > 64 ? npos : 0;  // a size line is short
    std::uint64_t size = 0;
    std::size_t digits = 0;
    for (auto i = pos; i < eol && std::isxdigit(static_cast<unsigned char>(b[i])); ++i, ++digits) {
      if (digits >= 15) return npos;  // past any body served here
      auto const c = static_cast<char>(std::tolower(static_cast<unsigned char>(b[i])));
      size = size * 16 + static_cast<std::uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    if (digits == 0) return npos;
    pos = eol + 2;
    if (size == 0) {
      // Trailers, then an empty line.
      if (b.size() - pos >= 2 && b.substr(pos, 2) == "\r\n") return pos + 2;
      auto const t = b.find("\r\n\r\n", pos);
      return t == npos ? 0 : t + 4;
    }
    if (b.size() - pos < size + 2) return 0;
    pos += static_cast<std::size_t>(size) + 2;
  }
}

/// Frames the request at the start of `b`. A body longer than `max_buffered` (or one the client
/// waits to be invited to send, `Expect: 100-continue`) is left to the reader: headers_only. A
/// request whose framing cannot be read (a bad length, bad chunks) is complete at its header
/// block, so httplib answers it.
inline frame frame_request(std::string_view b, std::size_t max_header_bytes,
                           std::size_t max_buffered) {
  auto const head_end = b.find("\r\n\r\n");
  if (head_end == std::string_view::npos)
    return {b.size() > max_header_bytes ? frame_state::too_large : frame_state::incomplete, 0};
  auto const body = head_end + 4;
  if (body > max_header_bytes + 4) return {frame_state::too_large, 0};
  bool chunked = false, expect = false, bad_length = false;
  std::uint64_t length = 0;
  auto pos = b.find("\r\n") + 2;  // past the request line
  while (pos < head_end + 2) {
    auto const eol = b.find("\r\n", pos);
    auto const line = b.substr(pos, eol - pos);
    pos = eol + 2;
    auto const colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    auto const name = trim(line.substr(0, colon));
    auto const value = trim(line.substr(colon + 1));
    if (iequals(name, "Transfer-Encoding")) {
      chunked = value.size() >= 7 && iequals(value.substr(value.size() - 7), "chunked");
    } else if (iequals(name, "Expect")) {
      expect = iequals(value, "100-continue");
    } else if (iequals(name, "Content-Length")) {
      std::uint64_t v = 0;
      bool ok = !value.empty() && value.size() <= 18;
      for (char c : value) {
        ok = ok && c >= '0' && c <= '9';
        v = v * 10 + static_cast<std::uint64_t>(c - '0');
      }
      bad_length = bad_length || !ok;
      length = ok ? v : 0;
    }
  }
  if (chunked) {
    auto const end = chunked_end(b, body);
    if (end == std::string_view::npos) return {frame_state::complete, body};
    if (end != 0) return {frame_state::complete, end};
    if (expect || b.size() - body > max_buffered) return {frame_state::headers_only, body};
    return {frame_state::incomplete, 0};
  }
  if (bad_length || length == 0) return {frame_state::complete, body};
  if (b.size() - body >= length) return {frame_state::complete, body + length};
  if (expect || length > max_buffered) return {frame_state::headers_only, body};
  return {frame_state::incomplete, 0};
}

}  // namespace tf::serve::detail
