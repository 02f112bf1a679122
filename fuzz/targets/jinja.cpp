// Fuzzes the Jinja lexer, parser and evaluator: the input is a template, rendered with a chat
// context (messages with text parts, tools, flags). Tight limits keep each input fast; the
// defaults are the same code with larger numbers. Contract: tf::error for a bad or runaway
// template; never a crash, a hang past the time limit or output past the size limit.
#include <tf/jinja/template.hpp>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"

namespace {

nlohmann::ordered_json const& context() {
  static const auto ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": [{"type": "text", "text": "Hi <b>there</b>"},
                                   {"type": "image"}]},
      {"role": "assistant", "content": "<think>hm</think>Hello!",
       "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1, "y": [1.5, null]}}}]},
      {"role": "tool", "content": "42"},
      {"role": "user", "content": "Again\nplease \u00e9\u20ac\ud83d\ude00"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<bos>", "eos_token": "<eos>", "n": 3, "f": 2.5, "nothing": null
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tf::jinja::render_options ro;
  ro.now = 0;
  ro.max_steps = 50000;
  ro.max_output_bytes = 1 << 20;
  ro.max_items = 100000;
  ro.max_seconds = 1.0;
  try {
    tf::jinja::template_t t(tf_fuzz::as_text(data, size));
    auto out = t.render_json(context(), ro);
    tf_fuzz::check(out.size() <= ro.max_output_bytes, "rendered output within the limit");
  } catch (tf::error const&) {
  }
  return 0;
}
