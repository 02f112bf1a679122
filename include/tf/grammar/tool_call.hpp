#pragma once
/// Grammars of one forced tool call, in the formats the chat templates teach: JSON in tags
/// (Qwen3, Hermes) and the tagged-parameter formats (Qwen3.5 / Nemotron XML, GLM-4.5), each
/// parameter's value valid under its schema.
#include <tf/grammar/grammar.hpp>
#include <tf/grammar/json_schema.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::grammar {

namespace detail {
// Finishes a call grammar: `prefix`, one of `calls`, `suffix`.
inline std::shared_ptr<grammar> one_call(std::shared_ptr<grammar> g, std::string_view prefix,
                                         std::vector<sequence> calls, std::string_view suffix) {
  auto root = g->literal(prefix);
  root.push_back(grammar::ref(g->rule(std::move(calls))));
  for (auto const& e : g->literal(suffix)) root.push_back(e);
  g->set_root(g->rule({root}));
  g->finish();
  return g;
}
}  // namespace detail

/// A tool a call may name: its name and its parameters' schema (null: any object).
using tool_signature = std::pair<std::string, nlohmann::json>;

/// `prefix`, {"name": "<name>", "arguments": <valid under the tool's parameters>} (name first,
/// as the templates show it), `suffix`.
inline std::shared_ptr<grammar> compile_json_tool_call(std::vector<tool_signature> const& tools,
                                                       std::string_view prefix,
                                                       std::string_view suffix) {
  auto g = std::make_shared<grammar>();
  std::vector<sequence> calls;
  for (auto const& [name, params] : tools) {
    auto const schema = params.is_null() ? nlohmann::json{{"type", "object"}} : params;
    detail::schema_compiler c(*g, schema);
    auto const v = c.compile(schema, "#/" + name);
    auto call = g->literal(R"({"name": )" + nlohmann::json(name).dump() + R"(, "arguments": )");
    call.push_back(grammar::ref(v));
    call.push_back(g->literal("}").front());
    calls.push_back(std::move(call));
  }
  return detail::one_call(std::move(g), prefix, std::move(calls), suffix);
}

/// The fixed text of a tagged-parameter call: open + name + after_name, then per parameter
/// key_open + key + key_close + value + value_close, then close.
struct tagged_call_style {
  std::string open, after_name, key_open, key_close, value_close, close;
};

/// Qwen3.5 / Nemotron-H: <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n...
inline tagged_call_style xml_function_style() {
  return {"<tool_call>\n<function=",  ">\n", "<parameter=", ">\n", "\n</parameter>\n",
          "</function>\n</tool_call>"};
}

/// GLM-4.5: <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n...</tool_call>
inline tagged_call_style glm45_style() {
  return {"<tool_call>",    "\n",          "<arg_key>", "</arg_key>\n<arg_value>",
          "</arg_value>\n", "</tool_call>"};
}

namespace detail {
// A parameter's enum (or const) when every choice is a string: written as plain text.
inline std::vector<std::string> string_choices(nlohmann::json const& ps) {
  std::vector<std::string> out;
  if (!ps.is_object()) return out;
  auto const choices = ps.contains("const")  ? nlohmann::json::array({ps["const"]})
                       : ps.contains("enum") ? ps["enum"]
                                             : nlohmann::json();
  if (!choices.is_array()) return out;
  for (auto const& c : choices) {
    if (!c.is_string()) return {};
    out.push_back(c.get<std::string>());
  }
  return out;
}
}  // namespace detail

/// `prefix`, then one call in `style`: the tool's parameters in the schema's order, required
/// ones always, others optionally. A string parameter's value is plain text (printable ASCII,
/// tabs and newlines, no '<', so it cannot run into a tag; maxLength bytes at most); any other
/// is JSON valid under its schema. Throws schema_error naming what it cannot compile.
inline std::shared_ptr<grammar> compile_tagged_tool_call(std::vector<tool_signature> const& tools,
                                                         tagged_call_style const& style,
                                                         std::string_view prefix) {
  auto g = std::make_shared<grammar>();
  byte_set text = byte_set::range(0x20, '<' - 1);
  text.add_range('<' + 1, 0x7e);
  text.add('\n');
  text.add('\t');
  auto const text_byte = g->bytes(text);
  std::vector<sequence> calls;
  for (auto const& [name, params] : tools) {
    auto const schema = params.is_null() ? nlohmann::json{{"type", "object"}} : params;
    if (schema.value("type", nlohmann::json("object")) != "object")
      throw schema_error("parameters", "the tool '" + name +
                                           "' takes parameters that are not an "
                                           "object");
    detail::schema_compiler c(*g, schema);
    std::set<std::string> required;
    if (schema.contains("required") && schema["required"].is_array())
      for (auto const& r : schema["required"])
        if (r.is_string()) required.insert(r.get<std::string>());
    auto call = g->literal(style.open + name + style.after_name);
    if (schema.contains("properties") && schema["properties"].is_object()) {
      for (auto const& [key, ps] : schema["properties"].items()) {
        auto one = g->literal(style.key_open + key + style.key_close);
        if (auto words = detail::string_choices(ps); !words.empty()) {
          std::vector<sequence> alts;
          for (auto const& w : words) alts.push_back(g->literal(w));
          one.push_back(grammar::ref(g->rule(std::move(alts))));
        } else if (ps.is_object() && ps.value("type", nlohmann::json()) == "string" &&
                   !ps.contains("enum") && !ps.contains("const")) {
          auto const most = ps.value("maxLength", std::int64_t{-1});
          one.push_back(grammar::ref(g->repeat({text_byte}, 1, most < 1 ? -1 : most)));
        } else {
          one.push_back(grammar::ref(c.compile(ps, "#/" + name + "/properties/" + key)));
        }
        for (auto const& e : g->literal(style.value_close)) one.push_back(e);
        if (required.contains(key))
          call.insert(call.end(), one.begin(), one.end());
        else
          call.push_back(grammar::ref(g->optional(std::move(one))));
      }
    }
    for (auto const& e : g->literal(style.close)) call.push_back(e);
    calls.push_back(std::move(call));
  }
  return detail::one_call(std::move(g), prefix, std::move(calls), {});
}

}  // namespace tf::grammar
