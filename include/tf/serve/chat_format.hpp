#pragma once
/// What a chat template teaches about replies, read from its text through tables (never from the
/// family's name): the tags around its reasoning and its tool-call format. From them: a chat
/// reply's parser, the grammar a forced call decodes under, and, for a template that teaches no
/// call format, llama-server's generic fallback (the tools described in a system message, the
/// reply one JSON object).
#include <tf/grammar/response_format.hpp>
#include <tf/serve/openai_request.hpp>
#include <tf/serve/reasoning.hpp>
#include <tf/serve/served_model.hpp>
#include <tf/serve/tool_calls.hpp>
#include <tf/serve/tool_calls_stream.hpp>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

/// The tags around a reply's reasoning.
struct reasoning_tags {
  std::string_view open, close;
};

/// Templates that think, by the text that shows it: Qwen3 / Qwen3.5 / GLM-4.5 / Nemotron-H's
/// <think> block, Gemma 4's thought channel.
inline constexpr std::array<std::pair<std::string_view, reasoning_tags>, 2> reasoning_table{{
    {"<think>", {"<think>", "</think>"}},
    {"<|channel>thought", {"<|channel>thought", "<channel|>"}},
}};

/// The reasoning tags `tmpl` teaches, if it thinks.
inline std::optional<reasoning_tags> detect_reasoning_tags(std::string_view tmpl) {
  for (auto const& [marker, tags] : reasoning_table)
    if (tmpl.find(marker) != std::string_view::npos) return tags;
  return std::nullopt;
}

/// A chat request's reply format under its model's template.
struct chat_format {
  std::optional<reasoning_tags> think;
  bool opened = false;                    // the prompt's end left the reply inside its reasoning
  tool_format tools = tool_format::none;  // how calls are written (none: not parsed)
};

/// The template's format for request `rq` with prompt `prompt`: calls parsed when it offers tools
/// and tool_choice is not "none", in the generic fallback when the template teaches no format.
inline chat_format chat_format_for(served_model const& b, openai_request const& rq,
                                   std::vector<std::int32_t> const& prompt) {
  auto const tmpl = b.chat_template();
  chat_format f;
  f.think = detect_reasoning_tags(tmpl);
  if (f.think) {
    std::string tail;
    for (auto k = prompt.size() > 16 ? prompt.size() - 16 : 0; k < prompt.size(); ++k)
      tail += b.piece(prompt[k]);
    f.opened = prompt_opens_thinking(tail, f.think->open, f.think->close);
  }
  if (!rq.tools.is_null() && rq.tool_choice != "none") {
    f.tools = detect_tool_format(tmpl);
    if (f.tools == tool_format::none) f.tools = tool_format::generic_json;
  }
  return f;
}

/// The chat reply's parser for `rq`.
inline reply_parser reply_parser_for(served_model const& b, openai_request const& rq,
                                     std::vector<std::int32_t> const& prompt) {
  auto const f = chat_format_for(b, rq, prompt);
  if (!f.think) return reply_parser(false, false, f.tools, rq.tools);
  return reply_parser(true, f.opened, f.tools, rq.tools, std::string(f.think->open),
                      std::string(f.think->close));
}

/// The grammar a chat reply decodes under: a forced call in the template's format for tool_choice
/// "required" or a named function (closing an opened reasoning part first); the generic
/// fallback's JSON reply under "auto"; else the request's response_format. Throws api_error.
inline grammar::response_format forced_format_for(served_model const& b, openai_request const& rq,
                                                  std::vector<std::int32_t> const& prompt) {
  auto const f = chat_format_for(b, rq, prompt);
  bool const forced = rq.tool_choice == "required" || rq.tool_choice == "function";
  if (forced && rq.response_format.rules)
    throw api_error(400,
                    "'tool_choice' forcing a call and 'response_format' both constrain the "
                    "reply; send one of them",
                    "invalid_request_error", "tool_choice", "invalid_value");
  try {
    if (!forced) {
      if (f.tools == tool_format::generic_json && !rq.response_format.rules)
        return grammar::generic_reply_format(nlohmann::json(rq.tools));
      return rq.response_format;
    }
    auto const style = f.tools == tool_format::json_in_tags   ? grammar::call_style::json_in_tags
                       : f.tools == tool_format::xml_function ? grammar::call_style::xml_function
                       : f.tools == tool_format::glm45        ? grammar::call_style::glm45
                       : f.tools == tool_format::call_braces  ? grammar::call_style::call_braces
                                                              : grammar::call_style::generic_json;
    std::string const prefix = f.opened ? std::string(f.think->close) + "\n\n" : std::string();
    return grammar::tool_call_format(nlohmann::json(rq.tools), rq.tool_choice_name, style, prefix);
  } catch (grammar::schema_error const& e) {
    throw api_error(400, e.what(), "invalid_request_error",
                    e.keyword == "tool_choice" ? "tool_choice" : "tools", "invalid_value");
  }
}

namespace detail {

// A message's text as the generic fallback writes it into a template that knows no tools.
inline std::string generic_text(nlohmann::ordered_json const& v) {
  return v.is_string() ? v.get<std::string>() : v.is_null() ? std::string() : v.dump();
}

}  // namespace detail

/// The messages a template that teaches no call format gets when tools are offered (llama.cpp's
/// generic fallback): the tools and the JSON reply format described in the system message (added
/// first, or appended to the client's), earlier calls written as that JSON and tool results as
/// user turns, so templates without tool roles render them.
inline nlohmann::ordered_json generic_tool_messages(nlohmann::ordered_json const& messages,
                                                    nlohmann::ordered_json const& tools,
                                                    bool forced) {
  std::string system =
      "You can call any of the following tools to satisfy the user's requests: " + tools.dump(2) +
      (forced ? "\n\nRespond in JSON format with `tool_call` (a request to call a tool): "
                "{\"tool_call\": {\"name\": ..., \"arguments\": {...}}}"
              : "\n\nRespond in JSON format, either with `tool_call` (a request to call tools) "
                "or with `response` reply to the user's request: {\"tool_call\": {\"name\": ..., "
                "\"arguments\": {...}}} or {\"response\": \"...\"}");
  auto out = nlohmann::ordered_json::array();
  std::size_t first = 0;
  if (!messages.empty() && messages[0].value("role", std::string()) == "system") {
    system = detail::generic_text(messages[0]["content"]) + "\n\n" + system;
    first = 1;
  }
  out.push_back({{"role", "system"}, {"content", system}});
  for (std::size_t i = first; i < messages.size(); ++i) {
    auto const& m = messages[i];
    auto const role = m.value("role", std::string());
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array()) {
      std::string text;
      for (auto const& c : m["tool_calls"]) {
        auto const& fn = c["function"];
        nlohmann::ordered_json call = {
            {"name", fn["name"]},
            {"arguments", fn.value("arguments", nlohmann::ordered_json::object())}};
        text += (text.empty() ? "" : "\n") + nlohmann::ordered_json{{"tool_call", call}}.dump();
      }
      out.push_back({{"role", "assistant"}, {"content", text}});
    } else if (role == "tool") {
      nlohmann::ordered_json result = {{"tool_response", detail::generic_text(m["content"])}};
      if (m.contains("tool_call_id")) result["tool_call_id"] = m["tool_call_id"];
      out.push_back({{"role", "user"}, {"content", result.dump()}});
    } else {
      out.push_back(m);
    }
  }
  return out;
}

/// The messages `rq` renders with under template `tmpl`: as sent, or rewritten for the generic
/// fallback when it offers tools (tool_choice not "none") and the template teaches no format.
inline nlohmann::ordered_json chat_prompt_messages(openai_request const& rq,
                                                   std::string_view tmpl) {
  if (rq.tools.is_null() || rq.tool_choice == "none" ||
      detect_tool_format(tmpl) != tool_format::none)
    return rq.messages;
  return generic_tool_messages(rq.messages, rq.tools, rq.tool_choice != "auto");
}

}  // namespace tf::serve
