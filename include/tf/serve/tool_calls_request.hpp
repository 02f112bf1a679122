#pragma once
/// The request side of tool calling: chat messages kept whole for the template (tool_calls with
/// their arguments parsed to objects, tool_call_id, reasoning_content, in the client's key
/// order), the `tools` list and `tool_choice`. Part of openai_request.hpp, which includes it
/// after its own detail helpers (api_error, content_text, unsupported): include that one.
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <string>

namespace tf::serve::detail {

using ojson = nlohmann::ordered_json;

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}], the
// arguments (a JSON string in OpenAI's API) parsed to an object as HF and vLLM hand templates.
inline ojson message_tool_calls(ojson const& calls, std::size_t i) {
  auto const param = fmt::format("messages[{}].tool_calls", i);
  if (!calls.is_array()) throw bad_param(param, "an array");
  auto out = ojson::array();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    auto c = calls[k];
    auto const p = fmt::format("{}[{}]", param, k);
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      throw bad_param(p, "an object {id, type: \"function\", function: {name, arguments}}");
    auto& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      throw bad_param(p + ".function.name", "a string");
    if (f.contains("arguments") && f["arguments"].is_string()) {
      auto a = ojson::parse(f["arguments"].get<std::string>(), nullptr, false);
      if (!a.is_discarded() && a.is_object()) f["arguments"] = std::move(a);
    } else if (f.contains("arguments") && !f["arguments"].is_object() &&
               !f["arguments"].is_null()) {
      throw bad_param(p + ".function.arguments", "a JSON string");
    }
    out.push_back(std::move(c));
  }
  return out;
}

/// The messages as the chat template gets them: every field kept, content as text.
inline ojson chat_messages(ojson const& ms) {
  if (!ms.is_array() || ms.empty()) throw bad_param("messages", "a non-empty array");
  auto out = ojson::array();
  for (std::size_t i = 0; i < ms.size(); ++i) {
    auto const& m = ms[i];
    if (!m.is_object()) throw bad_param(fmt::format("messages[{}]", i), "an object");
    if (!m.contains("role") || !m["role"].is_string())
      throw bad_param(fmt::format("messages[{}].role", i), "a string");
    auto role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer" &&
        role != "tool")
      throw api_error(400,
                      fmt::format("messages[{}].role '{}' is not one of system, developer, "
                                  "user, assistant, tool",
                                  i, role),
                      "invalid_request_error", fmt::format("messages[{}].role", i),
                      "invalid_value");
    ojson msg = ojson::object();
    msg["role"] = role;
    msg["content"] = content_text(nlohmann::json::parse(m.value("content", ojson()).dump()), i);
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (it.key() == "role" || it.key() == "content") continue;
      if (it.key() == "tool_calls") {
        if (!it->is_null()) msg["tool_calls"] = message_tool_calls(*it, i);
        continue;
      }
      msg[it.key()] = *it;
    }
    if (role == "tool" && msg.contains("tool_call_id") && !msg["tool_call_id"].is_string())
      throw bad_param(fmt::format("messages[{}].tool_call_id", i), "a string");
    out.push_back(std::move(msg));
  }
  return out;
}

/// The request's tools: [{type: "function", function: {name, description?, parameters?}}].
inline ojson chat_tools(ojson const& body) {
  if (!body.contains("tools") || body["tools"].is_null()) return nullptr;
  auto const& ts = body["tools"];
  if (!ts.is_array()) throw bad_param("tools", "an array of {type: \"function\", function}");
  if (ts.empty()) return nullptr;
  for (std::size_t k = 0; k < ts.size(); ++k) {
    auto const& t = ts[k];
    auto const p = fmt::format("tools[{}]", k);
    if (!t.is_object() || t.value("type", std::string("function")) != "function" ||
        !t.contains("function") || !t["function"].is_object())
      throw bad_param(p, "an object {type: \"function\", function: {name, parameters}}");
    if (!t["function"].contains("name") || !t["function"]["name"].is_string())
      throw bad_param(p + ".function.name", "a string");
  }
  return ts;
}

/// tool_choice: "none" (tools offered, replies not parsed, as vLLM does), "auto", "required"
/// (a call to one of the tools is forced) or a named function (a call to it is forced); the
/// name, for the last, in `name`.
inline std::string tool_choice(ojson const& body, std::string& name) {
  if (!body.contains("tool_choice") || body["tool_choice"].is_null()) return "auto";
  auto const& v = body["tool_choice"];
  auto const has_tools =
      body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
  if (v.is_string() && (v == "none" || v == "auto")) return v.get<std::string>();
  auto bad = [&] {
    return api_error(400,
                     fmt::format("'tool_choice' {} must be \"none\", \"auto\", \"required\" or "
                                 "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                                 v.dump()),
                     "invalid_request_error", "tool_choice", "invalid_value");
  };
  std::string mode;
  if (v.is_string() && v == "required") {
    mode = "required";
  } else if (v.is_object() && v.value("type", ojson()) == "function" && v.contains("function") &&
             v["function"].is_object() && v["function"].contains("name") &&
             v["function"]["name"].is_string()) {
    mode = "function";
    name = v["function"]["name"].get<std::string>();
  } else {
    throw bad();
  }
  if (!has_tools)
    throw api_error(
        400, fmt::format("'tool_choice' {} forces a tool call but 'tools' lists none", v.dump()),
        "invalid_request_error", "tool_choice", "invalid_value");
  return mode;
}

}  // namespace tf::serve::detail

namespace tf::serve {

/// The chat template's variables for a parsed request: its chat_template_kwargs, and `tools`
/// when it offers some.
inline nlohmann::ordered_json chat_template_options(openai_request const& r) {
  nlohmann::ordered_json options(r.chat_template_kwargs);
  if (!r.tools.is_null()) options["tools"] = r.tools;
  return options;
}

}  // namespace tf::serve
