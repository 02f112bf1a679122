#pragma once
/// OpenAI's response_format -> a grammar ({"type": "text"}: none), and the binding of a grammar to
/// a served model's vocabulary, with the token trie cached per model and the bound constraint
/// (and so its mask cache) per schema.
#include <tf/grammar/json_schema.hpp>
#include <tf/grammar/token_mask.hpp>
#include <tf/grammar/tool_call.hpp>

#include <nlohmann/json.hpp>

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tf::grammar {

/// A parsed response_format: its type, and for json_object / json_schema the grammar and a key
/// naming it (the canonical schema text).
struct response_format {
  std::string type = "text";
  std::string key;
  std::shared_ptr<grammar const> rules;
};

/// Parses `f` (the request's response_format value); throws schema_error naming the field or
/// keyword it refuses.
inline response_format parse_response_format(nlohmann::json const& f) {
  response_format r;
  if (f.is_null()) return r;
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
    throw schema_error("response_format",
                       "'response_format' must be an object with a string 'type': \"text\", "
                       "\"json_object\" or \"json_schema\"");
  r.type = f["type"].get<std::string>();
  if (r.type == "text") return r;
  if (r.type == "json_object") {
    r.key = "json_object";
    r.rules = json_object_grammar();
    return r;
  }
  if (r.type != "json_schema")
    throw schema_error("response_format.type",
                       fmt::format("'response_format' type '{}' is not one of text, json_object, "
                                   "json_schema",
                                   r.type));
  if (!f.contains("json_schema") || !f["json_schema"].is_object())
    throw schema_error("response_format.json_schema",
                       "'response_format' of type json_schema needs a 'json_schema' object");
  auto const& js = f["json_schema"];
  if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
    throw schema_error("response_format.json_schema.strict", "'strict' must be a boolean");
  if (!js.contains("schema"))  // OpenAI: no schema means any JSON object
    throw schema_error("response_format.json_schema.schema",
                       "'json_schema' needs a 'schema' (use type json_object for any object)");
  auto const& schema = js["schema"];
  r.key = "json_schema:" + schema.dump();
  r.rules = compile_json_schema(schema);
  return r;
}

/// How a forced tool call is written: JSON in tags, a tagged-parameter style, the braced format,
/// or llama-server's generic fallback (the reply one JSON object {"tool_call": {name, arguments}}).
enum class call_style { json_in_tags, xml_function, glm45, call_braces, generic_json };

/// A forced tool call: `prefix`, then one call to one of `tools` (OpenAI's list; `only` names
/// the one function allowed, empty: any) in `style`, arguments valid under its parameters.
/// Throws schema_error naming what it cannot compile.
inline response_format tool_call_format(nlohmann::json const& tools, std::string const& only,
                                        call_style style, std::string_view prefix) {
  std::vector<tool_signature> allowed;
  for (auto const& t : tools) {
    auto const& f = t["function"];
    auto name = f["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    allowed.emplace_back(std::move(name), f.value("parameters", nlohmann::json()));
  }
  if (allowed.empty())
    throw schema_error("tool_choice",
                       fmt::format("'tool_choice' names '{}', which is not in 'tools'", only));
  response_format r;
  r.type = "tool_call";
  r.key = fmt::format("tool_call:{}|{}|{}|{}", static_cast<int>(style), prefix, only, tools.dump());
  switch (style) {
    case call_style::json_in_tags:
      r.rules =
          compile_json_tool_call(allowed, std::string(prefix) + "<tool_call>\n", "\n</tool_call>");
      break;
    case call_style::xml_function:
      r.rules = compile_tagged_tool_call(allowed, xml_function_style(), prefix);
      break;
    case call_style::glm45:
      r.rules = compile_tagged_tool_call(allowed, glm45_style(), prefix);
      break;
    case call_style::call_braces:
      r.rules = compile_braced_tool_call(allowed, prefix);
      break;
    case call_style::generic_json:
      r.rules = compile_json_tool_call(allowed, std::string(prefix) + R"({"tool_call": )", "}");
      break;
  }
  return r;
}

/// The generic fallback's reply under tool_choice "auto": {"tool_call": {"name", "arguments"}}
/// for one of `tools`, or {"response": text} (llama-server's anyOf of the two).
inline response_format generic_reply_format(nlohmann::json const& tools) {
  auto calls = nlohmann::json::array();
  for (auto const& t : tools) {
    auto const& f = t["function"];
    nlohmann::json args = f.value("parameters", nlohmann::json{{"type", "object"}});
    if (args.is_null()) args = {{"type", "object"}};
    calls.push_back(
        {{"type", "object"},
         {"properties", {{"name", {{"const", f["name"]}}}, {"arguments", std::move(args)}}},
         {"required", {"name", "arguments"}}});
  }
  nlohmann::json const call = calls.size() == 1 ? calls[0] : nlohmann::json{{"anyOf", calls}};
  nlohmann::json const schema = {
      {"anyOf",
       {{{"type", "object"}, {"properties", {{"tool_call", call}}}, {"required", {"tool_call"}}},
        {{"type", "object"},
         {"properties", {{"response", {{"type", "string"}}}}},
         {"required", {"response"}}}}}};
  response_format r;
  r.type = "tool_call";
  r.key = "generic_reply:" + schema.dump();
  r.rules = compile_json_schema(schema);
  return r;
}

namespace detail {

struct binding_cache {
  std::mutex mutex;
  std::vector<std::pair<std::weak_ptr<void const>, std::shared_ptr<token_table const>>> tables;
  std::deque<std::pair<std::string, std::shared_ptr<constraint const>>> bound;  // newest first
};
inline binding_cache& cache() {
  static binding_cache c;
  return c;
}

}  // namespace detail

/// The token trie of `owner`'s vocabulary (`piece(t)` the bytes of token t, 0 <= t < vocab),
/// built once per owner while it lives.
template <class Owner, class Piece>
std::shared_ptr<token_table const> table_for(std::shared_ptr<Owner> const& owner, std::size_t vocab,
                                             Piece piece) {
  auto& c = detail::cache();
  std::weak_ptr<void const> const w = owner;
  {
    std::lock_guard lock(c.mutex);
    std::erase_if(c.tables, [](auto const& e) { return e.first.expired(); });
    for (auto const& [k, t] : c.tables)
      if (!k.owner_before(w) && !w.owner_before(k)) return t;
  }
  std::vector<std::string> bytes(vocab);
  for (std::size_t t = 0; t < vocab; ++t) bytes[t] = piece(static_cast<std::int32_t>(t));
  auto table = std::make_shared<token_table const>(std::move(bytes));
  std::lock_guard lock(c.mutex);
  c.tables.emplace_back(w, table);
  return table;
}

/// `f`'s grammar bound to `table` and `eos`, reused (with its masks) for the same schema.
inline std::shared_ptr<constraint const> bind_grammar(
    response_format const& f, std::shared_ptr<token_table const> const& table,
    std::vector<std::int32_t> const& eos) {
  if (!f.rules) return nullptr;
  auto& c = detail::cache();
  auto key = fmt::format("{}|", static_cast<void const*>(table.get()));
  for (auto t : eos) key += fmt::format("{},", t);
  key += "|" + f.key;
  std::lock_guard lock(c.mutex);
  for (auto it = c.bound.begin(); it != c.bound.end(); ++it)
    if (it->first == key) {
      auto hit = *it;
      c.bound.erase(it);
      c.bound.push_front(hit);
      return hit.second;
    }
  auto con = std::make_shared<constraint const>(f.rules, table, eos);
  c.bound.emplace_front(std::move(key), con);
  if (c.bound.size() > 16) c.bound.pop_back();
  return con;
}

/// `f` bound to a served model (vocab_size(), piece(t), stop_tokens()); null for text. Tokens
/// the codec cannot name (ids past the tokenizer's vocabulary) are never allowed.
template <class Model>
std::shared_ptr<constraint const> bind_to_model(response_format const& f,
                                                std::shared_ptr<Model> const& model) {
  if (!f.rules) return nullptr;
  auto table = table_for(model, model->vocab_size(), [&](std::int32_t t) -> std::string {
    try {
      return model->piece(t);
    } catch (std::exception const&) {
      return {};
    }
  });
  return bind_grammar(f, table, model->stop_tokens());
}

}  // namespace tf::grammar
