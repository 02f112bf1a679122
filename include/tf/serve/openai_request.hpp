#pragma once
/// OpenAI request bodies -> one parsed request, with every type and range checked; bad input
/// throws api_error carrying the HTTP status and the OpenAI error object's fields.
#include <tf/grammar/response_format.hpp>
#include <tf/sample/defaults.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/serve/detail/json_depth.hpp>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tf::serve {

/// An error the server answers with {"error": {message, type, param, code}}.
struct api_error : std::runtime_error {
  int status;
  std::string type, param, code;
  api_error(int status_, std::string message, std::string type_ = "invalid_request_error",
            std::string param_ = {}, std::string code_ = {})
      : std::runtime_error(std::move(message)),
        status(status_),
        type(std::move(type_)),
        param(std::move(param_)),
        code(std::move(code_)) {}

  /// The OpenAI error object.
  nlohmann::json body() const {
    using nlohmann::json;
    return json{{"error",
                 {{"message", what()},
                  {"type", type},
                  {"param", param.empty() ? json(nullptr) : json(param)},
                  {"code", code.empty() ? json(nullptr) : json(code)}}}};
  }
};

/// One prompt of /v1/completions: text, or token ids (OpenAI's array forms).
struct prompt_input {
  std::string text;
  std::vector<std::int32_t> ids;
  bool is_ids = false;
};

/// A parsed /v1/chat/completions or /v1/completions body.
struct openai_request {
  bool chat = true;
  std::string model;
  // chat: [{role, content: string, ...every other field}] in the client's key order
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;      // chat: the request's tools (null when none)
  std::string tool_choice = "auto";  // "auto", "none" (replies not parsed), "required", "function"
  std::string tool_choice_name;      // tool_choice "function": the function a call is forced to
  nlohmann::json chat_template_kwargs = nlohmann::json::object();  // chat: extra template variables
  std::vector<prompt_input> prompts;  // completions: each prompt's choices come in prompt order
  int max_tokens = -1;
  sample::sampling_params sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  std::optional<bool> draft;         // false: no speculative drafts; absent: the server's choice
  int n = 1;                         // choices to sample (each its own stream)
  std::optional<std::int64_t> seed;  // absent: the server draws one
  bool echo = false;                 // completions: the prompt text before the completion
  // The prompt's own logprobs: -1 none, else that many alternatives per prompt token (vLLM's
  // prompt_logprobs; echo with logprobs asks for them too).
  int prompt_logprobs = -1;
  bool tokens_as_ids = false;  // vLLM's return_tokens_as_token_ids: logprobs name "token_id:N"
  bool ignore_eos = false;     // vLLM / llama-server: generate past end-of-generation
  bool cache_prompt = true;    // llama-server: false reads the whole prompt afresh
  grammar::response_format response_format;  // json_object / json_schema: constrained decoding
};

namespace detail {

inline api_error bad_param(std::string const& param, std::string const& want) {
  return api_error(400, fmt::format("'{}' must be {}", param, want), "invalid_request_error", param,
                   "invalid_type");
}

inline double number(nlohmann::json const& body, char const* key, double lo, double hi,
                     double fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  auto const& v = body[key];
  if (!v.is_number()) throw bad_param(key, "a number");
  double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    throw api_error(400, fmt::format("'{}' is {}; it must be in [{}, {}]", key, d, lo, hi),
                    "invalid_request_error", key, "invalid_value");
  return d;
}

inline std::int64_t integer(nlohmann::json const& body, char const* key, std::int64_t lo,
                            std::int64_t hi, std::int64_t fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  auto const& v = body[key];
  if (!v.is_number_integer() && !v.is_number_unsigned()) throw bad_param(key, "an integer");
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    throw api_error(400, fmt::format("'{}' must be at most {}", key, hi), "invalid_request_error",
                    key, "invalid_value");
  auto i = v.get<std::int64_t>();
  if (i < lo || i > hi)
    throw api_error(400, fmt::format("'{}' is {}; it must be in [{}, {}]", key, i, lo, hi),
                    "invalid_request_error", key, "invalid_value");
  return i;
}

inline bool boolean(nlohmann::json const& body, char const* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_boolean()) throw bad_param(key, "a boolean");
  return body[key].get<bool>();
}

// A message's content: a string, or text parts [{type: "text", text}].
inline std::string content_text(nlohmann::json const& c, std::size_t i) {
  auto param = fmt::format("messages[{}].content", i);
  if (c.is_null()) return {};
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_param(param, "a string or an array of text parts");
  std::string s;
  for (auto const& part : c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw bad_param(param, "an array of {\"type\": \"text\", \"text\": string} parts");
    s += part["text"].get<std::string>();
  }
  return s;
}

// One token id of a prompt array.
inline std::int32_t prompt_token(nlohmann::json const& v) {
  if (!v.is_number_integer() && !v.is_number_unsigned())
    throw bad_param("prompt",
                    "a string, an array of strings, an array of token ids or an array "
                    "of token-id arrays");
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > 0x7fffffffULL
                             : v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 0x7fffffffLL)
    throw api_error(400, fmt::format("'prompt' token id {} is not a token id", v.dump()),
                    "invalid_request_error", "prompt", "invalid_value");
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

// /v1/completions' prompt in OpenAI's four forms: a string, strings, token ids, token-id arrays.
inline std::vector<prompt_input> prompts(nlohmann::json const& p) {
  std::vector<prompt_input> out;
  auto ids_of = [](nlohmann::json const& a) {
    prompt_input in;
    in.is_ids = true;
    for (auto const& t : a) in.ids.push_back(prompt_token(t));
    if (in.ids.empty())
      throw api_error(400, "'prompt' has an empty array of token ids", "invalid_request_error",
                      "prompt", "invalid_value");
    return in;
  };
  if (p.is_string()) {
    out.push_back({p.get<std::string>(), {}, false});
  } else if (p.is_array() && !p.empty() && p[0].is_string()) {
    for (auto const& x : p) {
      if (!x.is_string()) throw bad_param("prompt", "an array of strings (all of them strings)");
      out.push_back({x.get<std::string>(), {}, false});
    }
  } else if (p.is_array() && !p.empty() && p[0].is_array()) {
    for (auto const& x : p) {
      if (!x.is_array()) throw bad_param("prompt", "an array of token-id arrays (all arrays)");
      out.push_back(ids_of(x));
    }
  } else if (p.is_array() && !p.empty()) {
    out.push_back(ids_of(p));
  } else {
    throw bad_param("prompt",
                    "a string, an array of strings, an array of token ids or an array "
                    "of token-id arrays (not empty)");
  }
  return out;
}

inline api_error unsupported(std::string const& param, std::string const& why) {
  return api_error(400, why, "invalid_request_error", param, "unsupported_parameter");
}

// logit_bias: {"token id": bias in [-100, 100]}, as OpenAI sends it (ids as strings).
inline std::vector<sample::token_bias> logit_bias(nlohmann::json const& body) {
  std::vector<sample::token_bias> out;
  if (!body.contains("logit_bias") || body["logit_bias"].is_null()) return out;
  auto const& m = body["logit_bias"];
  if (!m.is_object())
    throw bad_param("logit_bias", "an object of token id -> bias, e.g. {\"50256\": -100}");
  for (auto const& [key, v] : m.items()) {
    std::size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (std::exception const&) {
      used = 0;
    }
    if (used != key.size() || key.empty() || id < 0 ||
        id > std::numeric_limits<std::int32_t>::max())
      throw api_error(
          400, fmt::format("'logit_bias' key '{}' is not a token id (a non-negative integer)", key),
          "invalid_request_error", "logit_bias", "invalid_value");
    if (!v.is_number()) throw bad_param("logit_bias", "an object whose values are numbers");
    double const b = v.get<double>();
    if (!(b >= -100.0 && b <= 100.0))
      throw api_error(
          400, fmt::format("'logit_bias' for token {} is {}; it must be in [-100, 100]", id, b),
          "invalid_request_error", "logit_bias", "invalid_value");
    out.push_back({static_cast<std::int32_t>(id), static_cast<float>(b)});
  }
  return out;
}

// True when `key` is present with a value other than null (and, for arrays, not empty).
inline bool given(nlohmann::json const& body, char const* key) {
  if (!body.contains(key) || body[key].is_null()) return false;
  return !(body[key].is_array() && body[key].empty());
}

/// OpenAI fields tf knows and cannot honour yet: a request that sets one is refused with a 400
/// naming it rather than answered as if it had not been sent.
inline void refuse_unsupported(nlohmann::json const& body, bool chat) {
  if (given(body, "functions"))
    throw unsupported("functions", "tf does not do function calling: 'functions' is not supported");
  if (given(body, "function_call")) {
    auto const& v = body["function_call"];
    if (!(v.is_string() && (v == "none" || v == "auto")))
      throw unsupported("function_call",
                        "'function_call' is the deprecated 'functions' API; use 'tools'");
  }
  if (given(body, "modalities")) {
    auto const& m = body["modalities"];
    if (!m.is_array() || m.size() != 1 || m[0] != "text")
      throw unsupported("modalities", "tf answers in text only: 'modalities' must be [\"text\"]");
  }
  for (char const* key : {"audio", "prediction", "web_search_options"})
    if (given(body, key)) throw unsupported(key, fmt::format("tf does not support '{}'", key));
  if (!chat && body.contains("suffix") && !body["suffix"].is_null() &&
      !(body["suffix"].is_string() && body["suffix"].get<std::string>().empty()))
    throw unsupported("suffix", "tf does not do insertion: 'suffix' is not supported");
}

}  // namespace detail

}  // namespace tf::serve

#include <tf/serve/tool_calls_request.hpp>

namespace tf::serve {

/// Parses and checks a request body; `chat` picks /v1/chat/completions over /v1/completions.
/// Sampling fields the body leaves out take `defaults`; fields no API defines are ignored.
inline openai_request parse_openai_request(std::string const& text, bool chat,
                                           sample::sampling_defaults const& defaults = {}) {
  using nlohmann::json;
  if (detail::json_depth(text, detail::max_request_depth) > detail::max_request_depth)
    throw api_error(400,
                    fmt::format("the request body nests deeper than {} arrays and objects",
                                detail::max_request_depth),
                    "invalid_request_error", "", "invalid_json");
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded())
    throw api_error(400, "the request body is not valid JSON", "invalid_request_error", "",
                    "invalid_json");
  if (!body.is_object())
    throw api_error(400, "the request body must be a JSON object", "invalid_request_error", "",
                    "invalid_json");
  openai_request r;
  r.chat = chat;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw detail::bad_param("model", "a string");
    r.model = body["model"].get<std::string>();
  }
  if (chat) {
    if (!body.contains("messages"))
      throw api_error(400, "'messages' is required", "invalid_request_error", "messages",
                      "missing_required_parameter");
    auto const ordered = nlohmann::ordered_json::parse(text);  // parsed above: valid
    r.messages = detail::chat_messages(ordered["messages"]);
    r.tools = detail::chat_tools(ordered);
    r.tool_choice = detail::tool_choice(ordered, r.tool_choice_name);
    if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
      auto const& kw = body["chat_template_kwargs"];
      if (!kw.is_object())
        throw detail::bad_param(
            "chat_template_kwargs",
            "an object of template variables, e.g. {\"enable_thinking\": false}");
      if (kw.contains("messages"))
        throw api_error(400,
                        "'chat_template_kwargs' cannot set 'messages'; send them as 'messages'",
                        "invalid_request_error", "chat_template_kwargs", "invalid_value");
      r.chat_template_kwargs = kw;
    }
    // OpenAI's reasoning_effort reaches the template as a variable (as vLLM passes it), unless
    // chat_template_kwargs set one.
    if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
      if (!body["reasoning_effort"].is_string())
        throw detail::bad_param("reasoning_effort", "a string");
      if (!r.chat_template_kwargs.contains("reasoning_effort"))
        r.chat_template_kwargs["reasoning_effort"] = body["reasoning_effort"];
    }
  } else {
    if (!body.contains("prompt"))
      throw api_error(400, "'prompt' is required", "invalid_request_error", "prompt",
                      "missing_required_parameter");
    r.prompts = detail::prompts(body["prompt"]);
  }
  // 0 scores a prompt without generating (echo or prompt_logprobs, checked below).
  auto mt = detail::integer(body, "max_tokens", 0, 1 << 24, -1);
  mt = detail::integer(body, "max_completion_tokens", 0, 1 << 24, mt);
  r.max_tokens = static_cast<int>(mt);
  auto const base = defaults.params();
  r.sampling.temperature =
      static_cast<float>(detail::number(body, "temperature", 0.0, 2.0, base.temperature));
  r.sampling.top_p = static_cast<float>(detail::number(body, "top_p", 1e-9, 1.0, base.top_p));
  r.sampling.top_k = static_cast<int>(detail::integer(body, "top_k", -1, 1 << 20, base.top_k));
  if (r.sampling.top_k < 0) r.sampling.top_k = 0;  // vLLM's -1 and 0 both mean off
  r.sampling.min_p = static_cast<float>(detail::number(body, "min_p", 0.0, 1.0, base.min_p));
  r.sampling.presence_penalty =
      static_cast<float>(detail::number(body, "presence_penalty", -2.0, 2.0, 0.0));
  r.sampling.frequency_penalty =
      static_cast<float>(detail::number(body, "frequency_penalty", -2.0, 2.0, 0.0));
  r.sampling.repetition_penalty = static_cast<float>(
      detail::number(body, "repetition_penalty", 1e-3, 10.0, base.repetition_penalty));
  if (body.contains("seed") && !body["seed"].is_null())
    r.seed = detail::integer(body, "seed", std::numeric_limits<std::int64_t>::min(),
                             std::numeric_limits<std::int64_t>::max(), 0);
  r.n = static_cast<int>(detail::integer(body, "n", 1, 128, 1));
  r.sampling.logit_bias = detail::logit_bias(body);
  r.ignore_eos = detail::boolean(body, "ignore_eos", false);
  r.cache_prompt = detail::boolean(body, "cache_prompt", true);
  try {
    r.response_format = grammar::parse_response_format(body.value("response_format", json()));
  } catch (grammar::schema_error const& e) {
    throw api_error(400, e.what(), "invalid_request_error", "response_format", "invalid_value");
  }
  detail::refuse_unsupported(body, chat);
  if (body.contains("stop") && !body["stop"].is_null()) {
    auto const& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (auto const& x : s) {
        if (!x.is_string()) throw detail::bad_param("stop", "a string or up to 4 strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      throw detail::bad_param("stop", "a string or up to 4 strings");
    }
    std::erase_if(r.stop, [](auto const& x) { return x.empty(); });
  }
  r.stream = detail::boolean(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    if (!body["stream_options"].is_object()) throw detail::bad_param("stream_options", "an object");
    r.include_usage = detail::boolean(body["stream_options"], "include_usage", false);
  }
  if (chat) {
    r.logprobs = detail::boolean(body, "logprobs", false);
    r.sampling.top_logprobs = static_cast<int>(detail::integer(body, "top_logprobs", 0, 20, 0));
    if (r.sampling.top_logprobs > 0 && !r.logprobs)
      throw api_error(400, "'top_logprobs' needs 'logprobs': true", "invalid_request_error",
                      "top_logprobs", "invalid_value");
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    r.logprobs = true;
    r.sampling.top_logprobs = static_cast<int>(detail::integer(body, "logprobs", 0, 20, 0));
  }
  r.echo = detail::boolean(body, "echo", false);
  if (r.echo && chat)
    throw detail::unsupported("echo",
                              "'echo' is a /v1/completions field; a chat reply does not repeat "
                              "the messages");
  r.prompt_logprobs = static_cast<int>(detail::integer(body, "prompt_logprobs", 0, 20, -1));
  if (r.echo && r.logprobs)
    r.prompt_logprobs = std::max(r.prompt_logprobs, r.sampling.top_logprobs);
  if (r.max_tokens == 0 && !r.echo && r.prompt_logprobs < 0)
    throw api_error(400,
                    "'max_tokens' 0 generates nothing; it scores a prompt only with 'echo' or "
                    "'prompt_logprobs'",
                    "invalid_request_error", "max_tokens", "invalid_value");
  if (!chat) {
    auto const best_of = detail::integer(body, "best_of", 1, 128, r.n);
    if (best_of != r.n)
      throw detail::unsupported("best_of",
                                fmt::format("'best_of' {} must equal 'n' ({}): tf returns every "
                                            "choice it samples and ranks none",
                                            best_of, r.n));
  }
  r.tokens_as_ids = detail::boolean(body, "return_tokens_as_token_ids", false);
  r.sampling.logprobs = r.logprobs;  // nobody sees it otherwise
  if (body.contains("draft")) r.draft = detail::boolean(body, "draft", true);
  return r;
}

}  // namespace tf::serve
