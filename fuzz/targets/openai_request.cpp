// Fuzzes the OpenAI request parser on chat and completion bodies (messages with string or
// nested content parts, sampling fields, stop, logit_bias, stream_options, ...).
// Contract: api_error for any body it refuses.
#include "clang14_shim.hpp"  // first: before any kernels/ header

#include <tf/serve/openai_request.hpp>

#include <string>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string const body(tf_fuzz::as_text(data, size));
  for (bool chat : {true, false}) {
    try {
      auto r = tf::serve::parse_openai_request(body, chat);
      tf_fuzz::check(r.n >= 1 && r.n <= 128, "n in [1, 128]");
      // 0 only scores the prompt, which needs echo or prompt_logprobs to return anything.
      tf_fuzz::check(r.max_tokens == -1 || r.max_tokens >= 1 ||
                         (r.max_tokens == 0 && (r.echo || r.prompt_logprobs >= 0)),
                     "max_tokens unset, positive, or 0 with echo/prompt_logprobs");
      tf_fuzz::check(!chat || r.messages.is_array(), "chat messages are an array");
      (void)r.messages.dump();
      (void)r.chat_template_kwargs.dump();
    } catch (tf::serve::api_error const& e) {
      tf_fuzz::check(e.status >= 400 && e.status < 500, "a refused body is a 4xx");
      (void)e.body().dump();
    }
  }
  return 0;
}
