#pragma once
/// How deep a JSON text nests, found without parsing it: a request body is refused before a
/// parse, copy or template render could recurse that deep.
#include <cstddef>
#include <string_view>

namespace tf::serve::detail {

/// The deepest nesting of arrays and objects in `text` (brackets inside strings do not count);
/// stops counting once past `limit`.
inline std::size_t json_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char const c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// Nesting deeper than this in a request body is refused with a 400.
inline constexpr std::size_t max_request_depth = 256;

}  // namespace tf::serve::detail
