#pragma once
/// OpenAI request bodies -> one parsed request, with every type and range checked; bad input
/// throws api_error carrying the HTTP status and the OpenAI error object's fields.
#include <tf/sample/sampler.hpp>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <cstdint>
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

/// A parsed /v1/chat/completions or /v1/completions body.
struct openai_request {
  bool chat = true;
  std::string model;
  nlohmann::json messages;  // chat: [{role, content: string}]
  nlohmann::json chat_template_kwargs = nlohmann::json::object();  // chat: extra template variables
  std::string prompt;                                              // completions
  int max_tokens = -1;
  sample::sampling_params sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  bool draft = false;
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

}  // namespace detail

/// Parses and checks a request body; `chat` picks /v1/chat/completions over /v1/completions.
inline openai_request parse_openai_request(std::string const& text, bool chat) {
  using nlohmann::json;
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
    auto const& ms = body["messages"];
    if (!ms.is_array() || ms.empty()) throw detail::bad_param("messages", "a non-empty array");
    r.messages = json::array();
    for (std::size_t i = 0; i < ms.size(); ++i) {
      auto const& m = ms[i];
      if (!m.is_object()) throw detail::bad_param(fmt::format("messages[{}]", i), "an object");
      if (!m.contains("role") || !m["role"].is_string())
        throw detail::bad_param(fmt::format("messages[{}].role", i), "a string");
      auto role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "developer" &&
          role != "tool")
        throw api_error(400,
                        fmt::format("messages[{}].role '{}' is not one of system, developer, "
                                    "user, assistant, tool",
                                    i, role),
                        "invalid_request_error", fmt::format("messages[{}].role", i),
                        "invalid_value");
      r.messages.push_back(
          {{"role", role}, {"content", detail::content_text(m.value("content", json()), i)}});
    }
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
  } else {
    if (!body.contains("prompt"))
      throw api_error(400, "'prompt' is required", "invalid_request_error", "prompt",
                      "missing_required_parameter");
    auto const& p = body["prompt"];
    if (p.is_string()) {
      r.prompt = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt = p[0].get<std::string>();
    } else {
      throw detail::bad_param("prompt", "a string (or an array of one string)");
    }
  }
  auto mt = detail::integer(body, "max_tokens", 1, 1 << 24, -1);
  mt = detail::integer(body, "max_completion_tokens", 1, 1 << 24, mt);
  r.max_tokens = static_cast<int>(mt);
  r.sampling.temperature = static_cast<float>(detail::number(body, "temperature", 0.0, 2.0, 1.0));
  r.sampling.top_p = static_cast<float>(detail::number(body, "top_p", 1e-9, 1.0, 1.0));
  r.sampling.top_k = static_cast<int>(detail::integer(body, "top_k", 0, 1 << 20, 0));
  r.sampling.min_p = static_cast<float>(detail::number(body, "min_p", 0.0, 1.0, 0.0));
  r.sampling.presence_penalty =
      static_cast<float>(detail::number(body, "presence_penalty", -2.0, 2.0, 0.0));
  r.sampling.frequency_penalty =
      static_cast<float>(detail::number(body, "frequency_penalty", -2.0, 2.0, 0.0));
  r.sampling.repetition_penalty =
      static_cast<float>(detail::number(body, "repetition_penalty", 1e-3, 10.0, 1.0));
  r.sampling.seed = static_cast<std::uint64_t>(
      detail::integer(body, "seed", std::numeric_limits<std::int64_t>::min(),
                      std::numeric_limits<std::int64_t>::max(), 0));
  if (detail::integer(body, "n", 1, 1, 1) != 1)
    throw api_error(400, "'n' must be 1", "invalid_request_error", "n", "invalid_value");
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
  r.sampling.logprobs = r.logprobs;  // nobody sees it otherwise
  r.draft = detail::boolean(body, "draft", false);
  return r;
}

}  // namespace tf::serve
