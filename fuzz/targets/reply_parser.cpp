// Fuzzes the chat reply parsers (include/tf/serve/tool_calls_stream.hpp): a model's reply in each
// tool-call format, with or without a reasoning part. Byte 0 picks the format and the reasoning
// tags, byte 1 where the reply is cut in two; the rest is the reply.
// Contract: nothing throws, and the reply fed whole or in two pieces parses the same.
#include <tf/serve/tool_calls_stream.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <string>

#include "fuzz_common.hpp"

namespace {

using tf::serve::reply_parser;
using tf::serve::reply_piece;
using tf::serve::tool_format;

constexpr std::array<tool_format, 6> formats = {
    tool_format::none,  tool_format::json_in_tags, tool_format::xml_function,
    tool_format::glm45, tool_format::call_braces,  tool_format::generic_json};

// A tool with typed parameters, so the text formats' values take their schema's types.
nlohmann::ordered_json const& tools() {
  static auto const t = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
    "name": "f", "parameters": {"type": "object", "properties": {
      "s": {"type": "string"}, "n": {"type": "integer"}, "b": {"type": "boolean"}}}}}])");
  return t;
}

reply_parser make(std::uint8_t pick) {
  auto const f = formats[pick % formats.size()];
  bool const think = (pick / formats.size()) % 2 != 0;
  bool const inside = (pick / formats.size() / 2) % 2 != 0;
  if ((pick & 0x80) != 0)
    return reply_parser(think, inside, f, tools(), "<|channel>thought", "<channel|>");
  return reply_parser(think, inside, f, tools());
}

bool same(reply_piece const& a, reply_piece const& b) {
  if (a.reasoning != b.reasoning || a.content != b.content || a.calls.size() != b.calls.size())
    return false;
  for (std::size_t k = 0; k < a.calls.size(); ++k)
    if (a.calls[k].name != b.calls[k].name || a.calls[k].arguments != b.calls[k].arguments)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  auto const pick = data[0];
  auto const text = tf_fuzz::as_text(data + 2, size - 2);
  auto const cut = text.empty() ? 0 : data[1] % (text.size() + 1);
  auto whole = make(pick).feed(text, true);
  auto p = make(pick);
  auto split = p.feed(text.substr(0, cut), false);
  auto rest = p.feed(text.substr(cut), true);
  split.reasoning += rest.reasoning;
  split.content += rest.content;
  for (auto& c : rest.calls) split.calls.push_back(std::move(c));
  tf_fuzz::check(same(whole, split), "a reply fed in two pieces parses as it does whole");
  // Every format but Qwen3's (whose "arguments" may be a string, passed on as written) writes
  // the arguments it parsed as JSON.
  if (formats[pick % formats.size()] != tool_format::json_in_tags)
    for (auto const& c : whole.calls)
      tf_fuzz::check(!nlohmann::json::parse(c.arguments, nullptr, false).is_discarded(),
                     "a parsed call's arguments are JSON text");
  return 0;
}
