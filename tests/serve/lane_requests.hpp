#pragma once
// What the lane host tests send and read: toy-codec requests, eight prompts of growing length,
// and a stream drained to its end.
#include <tf/serve/lane_host.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "toy_model.hpp"

namespace tf::serve {

/// One request's tokens and why it ended.
struct reply {
  std::vector<std::int32_t> tokens;
  finish_reason reason = finish_reason::error;
};

/// Reads `s` until it is done.
inline reply drain(std::shared_ptr<request_stream> s) {
  reply r;
  for (;;) {
    auto c = s->next(std::chrono::milliseconds(100));
    for (auto& t : c.tokens) r.tokens.push_back(t.token);
    if (c.done) {
      r.reason = c.reason;
      return r;
    }
  }
}

/// `text` as a toy-codec request for up to `max_tokens`, stopping at the codec's end token.
inline generation_request make_request(std::string const& text, int max_tokens) {
  toy_codec codec;
  generation_request g;
  g.prompt = codec.encode(text);
  g.max_tokens = max_tokens;
  g.stop_tokens = codec.stop_tokens();
  return g;
}

/// Eight prompts of 5 to 264 bytes.
inline std::vector<std::string> prompts() {
  std::vector<std::string> p;
  for (int i = 0; i < 8; ++i)
    p.push_back(std::string(static_cast<std::size_t>(5 + 37 * i), 'a' + i));
  return p;
}

}  // namespace tf::serve
