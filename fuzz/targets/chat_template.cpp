// Fuzzes the chat-template path a request takes: the body through the OpenAI parser, then its
// messages and chat_template_kwargs through each real template in fixtures/jinja (the first byte
// picks one), with the variables serve passes. Contract: api_error from the parser, tf::error
// from the template (the server's 400).
#include "clang14_shim.hpp"  // first: before any kernels/ header

#include <tf/jinja/template.hpp>
#include <tf/serve/openai_request.hpp>
#include <tf/tokenizer/chat_template.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <string>

#include "fuzz_common.hpp"

namespace {

std::array<std::string, 6> const& templates() {
  static const std::array<std::string, 6> t = {
      tf_fuzz::fixture("jinja/gemma3.jinja"),     tf_fuzz::fixture("jinja/qwen3.jinja"),
      tf_fuzz::fixture("jinja/qwen3_5.jinja"),    tf_fuzz::fixture("jinja/glm4_5.jinja"),
      tf_fuzz::fixture("jinja/nemotron_h.jinja"), tf_fuzz::fixture("jinja/gemma4.jinja")};
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  auto const& src = templates()[data[0] % templates().size()];
  std::string const body(tf_fuzz::as_text(data + 1, size - 1));
  tf::serve::openai_request r;
  try {
    r = tf::serve::parse_openai_request(body, true);
  } catch (tf::serve::api_error const&) {
    return 0;
  }
  // As text_codec::render_chat passes them: the generation prompt, BOS/EOS texts, then kwargs.
  nlohmann::json opts = {
      {"add_generation_prompt", true}, {"bos_token", "<bos>"}, {"eos_token", "<eos>"}};
  for (auto const& [key, value] : r.chat_template_kwargs.items()) opts[key] = value;
  tf::jinja::render_options ro;
  ro.now = 0;
  try {
    auto out = tf::tokenizer::render_chat<nlohmann::json>(src, r.messages, opts, ro);
    tf_fuzz::check(out.size() <= ro.max_output_bytes, "rendered output within the limit");
  } catch (tf::error const&) {
  }
  return 0;
}
