#pragma once
/// Grammars of one forced tool call, in the formats the chat templates teach: JSON in tags
/// (Qwen3, Hermes), the tagged-parameter formats (Qwen3.5 / Nemotron XML, GLM-4.5) and the
/// braced format (Gemma 4), each parameter's value valid under its schema.
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

namespace detail {

// Values in the braced format (Gemma 4's format_argument): strings between <|"|> marks (plain
// text without '<', so a mark cannot start inside one), objects with bare keys, arrays of such
// values; numbers, booleans and null as in JSON.
class braced_compiler {
 public:
  braced_compiler(grammar& g, nlohmann::json const& root) : g_(g), json_(g, root) {
    byte_set text = byte_set::range(0x20, '<' - 1);
    text.add_range('<' + 1, 0x7e);
    text.add('\n');
    text.add('\t');
    text_ = g.bytes(text);
  }

  std::int32_t value(nlohmann::json const& s, std::string const& path) {
    if (auto words = string_choices(s); !words.empty()) {
      std::vector<sequence> alts;
      for (auto const& w : words) alts.push_back(g_.literal(quote + w + quote));
      return g_.rule(std::move(alts));
    }
    auto const type = s.is_object() ? s.value("type", nlohmann::json()) : nlohmann::json();
    if (type == "string" && !s.contains("enum") && !s.contains("const")) {
      auto const most = s.value("maxLength", std::int64_t{-1});
      auto seq = g_.literal(quote);
      seq.push_back(grammar::ref(g_.repeat({text_}, 0, most < 0 ? -1 : most)));
      for (auto const& e : g_.literal(quote)) seq.push_back(e);
      return g_.rule({seq});
    }
    if (type == "object") return object(s, path);
    if (type == "array") {
      auto const item = value(s.value("items", nlohmann::json::object()), path + "/items");
      sequence more = g_.literal(",");
      more.push_back(grammar::ref(item));
      sequence some = {grammar::ref(item), grammar::ref(g_.repeat(more, 0, -1))};
      auto open = g_.literal("[");
      open.push_back(grammar::ref(g_.optional(some)));
      for (auto const& e : g_.literal("]")) open.push_back(e);
      return g_.rule({open});
    }
    if (type == "integer" || type == "number" || type == "boolean" || type == "null")
      return json_.compile(s, path);
    throw schema_error(path, "a tool parameter at " + path +
                                 " has a schema the braced call format cannot write (give it a "
                                 "type: string, number, integer, boolean, null, array or object)");
  }

  // {k:v,...}: the schema's properties in sorted order (nlohmann::json's, as the template's
  // dictsort writes them), required ones always, commas between the ones present (one
  // alternative per property that may come first).
  std::int32_t object(nlohmann::json const& s, std::string const& path) {
    std::vector<std::pair<sequence, bool>> props;  // key:value, required
    std::set<std::string> required;
    if (s.contains("required") && s["required"].is_array())
      for (auto const& r : s["required"])
        if (r.is_string()) required.insert(r.get<std::string>());
    if (s.contains("properties") && s["properties"].is_object())
      for (auto const& [key, ps] : s["properties"].items()) {
        auto kv = g_.literal(key + ":");
        kv.push_back(grammar::ref(value(ps, path + "/properties/" + key)));
        props.emplace_back(std::move(kv), required.contains(key));
      }
    std::vector<sequence> alts;
    bool any_required = false;
    for (std::size_t first = 0; first < props.size() && !any_required; ++first) {
      any_required = props[first].second;
      sequence seq = g_.literal("{");
      seq.insert(seq.end(), props[first].first.begin(), props[first].first.end());
      for (std::size_t j = first + 1; j < props.size(); ++j) {
        sequence next = g_.literal(",");
        next.insert(next.end(), props[j].first.begin(), props[j].first.end());
        if (props[j].second)
          seq.insert(seq.end(), next.begin(), next.end());
        else
          seq.push_back(grammar::ref(g_.optional(std::move(next))));
      }
      for (auto const& e : g_.literal("}")) seq.push_back(e);
      alts.push_back(std::move(seq));
    }
    if (!any_required) alts.push_back(g_.literal("{}"));
    return g_.rule(std::move(alts));
  }

 private:
  static constexpr std::string_view quote_text = "<|\"|>";
  inline static std::string const quote{quote_text};
  grammar& g_;
  schema_compiler json_;
  element text_;
};

}  // namespace detail

/// `prefix`, then <|tool_call>call:NAME{k:v,...}<tool_call|> for one of `tools` (Gemma 4's
/// format), the arguments valid under the tool's parameters. Throws schema_error naming what it
/// cannot write.
inline std::shared_ptr<grammar> compile_braced_tool_call(std::vector<tool_signature> const& tools,
                                                         std::string_view prefix) {
  auto g = std::make_shared<grammar>();
  std::vector<sequence> calls;
  for (auto const& [name, params] : tools) {
    auto const schema = params.is_null() ? nlohmann::json{{"type", "object"}} : params;
    if (schema.value("type", nlohmann::json("object")) != "object")
      throw schema_error("parameters",
                         "the tool '" + name + "' takes parameters that are not an object");
    detail::braced_compiler c(*g, schema);
    auto call = g->literal("<|tool_call>call:" + name);
    call.push_back(grammar::ref(c.object(schema, "#/" + name)));
    for (auto const& e : g->literal("<tool_call|>")) call.push_back(e);
    calls.push_back(std::move(call));
  }
  return detail::one_call(std::move(g), prefix, std::move(calls), {});
}

}  // namespace tf::grammar
