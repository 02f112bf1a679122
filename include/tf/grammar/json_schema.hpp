#pragma once
/// JSON Schema (a subset) -> grammar of the JSON texts that validate: type (object, array, string,
/// number, integer, boolean, null, or a list of them), properties, required,
/// additionalProperties, enum, const, items, minItems/maxItems, minLength/maxLength, anyOf, and
/// local $ref into $defs/definitions. Properties come in the schema's order; any other keyword is
/// refused by name. Also any JSON value (json_object mode).
#include <tf/grammar/json_rules.hpp>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::grammar {

/// A schema tf cannot compile: `keyword` names what it refused.
struct schema_error : std::runtime_error {
  std::string keyword;
  schema_error(std::string kw, std::string const& what)
      : std::runtime_error(what), keyword(std::move(kw)) {}
};

namespace detail {

class schema_compiler {
 public:
  schema_compiler(grammar& g, nlohmann::json const& root)
      : g_(g), root_(root), r_(add_json_rules(g)) {}

  std::int32_t any_value() const { return r_.value; }

  /// The rule for values valid under `s` (at JSON pointer `path`, for messages).
  std::int32_t compile(nlohmann::json const& s, std::string const& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("false", path, "the schema false accepts nothing");
      return r_.value;
    }
    if (!s.is_object()) fail("schema", path, "a schema must be an object or a boolean");
    for (auto const& [k, v] : s.items()) {
      if (!known(k))
        fail(k, path, fmt::format("'{}' is not supported in response_format schemas", k));
    }
    if (s.contains("$ref")) return reference(s, path);
    if (s.contains("const")) return literals(nlohmann::json::array({s["const"]}));
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        fail("enum", path, "'enum' must be a non-empty array");
      return literals(s["enum"]);
    }
    if (s.contains("anyOf")) {
      auto const& a = s["anyOf"];
      if (!a.is_array() || a.empty()) fail("anyOf", path, "'anyOf' must be a non-empty array");
      std::vector<sequence> alts;
      for (std::size_t i = 0; i < a.size(); ++i)
        alts.push_back({grammar::ref(compile(a[i], fmt::format("{}/anyOf/{}", path, i)))});
      return g_.rule(std::move(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      auto const& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (auto const& x : t) {
          if (!x.is_string()) fail("type", path, "'type' must be a string or strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail("type", path, "'type' must be a string or a non-empty array of strings");
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return r_.value;
    }
    std::vector<sequence> alts;
    for (auto const& t : types) alts.push_back({grammar::ref(typed(t, s, path))});
    return alts.size() == 1 ? alts[0][0].arg : g_.rule(std::move(alts));
  }

 private:
  [[noreturn]] static void fail(std::string const& kw, std::string const& path,
                                std::string const& why) {
    throw schema_error(kw, fmt::format("response_format schema at '{}': {}", path, why));
  }

  static bool known(std::string const& k) {
    static std::set<std::string> const ok = {
        "type",        "properties", "required",    "additionalProperties",
        "enum",        "const",      "items",       "minItems",
        "maxItems",    "minLength",  "maxLength",   "anyOf",
        "$ref",        "$defs",      "definitions", "title",
        "description", "default",    "examples",    "$schema",
        "$id",         "$comment",   "deprecated",  "readOnly",
        "writeOnly"};
    return ok.contains(k);
  }

  sequence lit(std::string const& t) { return g_.literal(t); }

  static std::int64_t count(nlohmann::json const& s, char const* k, std::int64_t fallback,
                            std::string const& path) {
    if (!s.contains(k)) return fallback;
    auto const& v = s[k];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 100000)
      fail(k, path, fmt::format("'{}' must be an integer in [0, 100000]", k));
    return v.get<std::int64_t>();
  }

  std::int32_t literals(nlohmann::json const& values) {
    std::vector<sequence> alts;
    for (auto const& v : values) alts.push_back(lit(v.dump()));
    return g_.rule(std::move(alts));
  }

  std::int32_t reference(nlohmann::json const& s, std::string const& path) {
    if (!s["$ref"].is_string()) fail("$ref", path, "'$ref' must be a string");
    auto const ref = s["$ref"].get<std::string>();
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (!ref.starts_with("#")) fail("$ref", path, fmt::format("'{}' is not a local $ref", ref));
    nlohmann::json const* target = nullptr;
    try {
      target = &root_.at(nlohmann::json::json_pointer(ref.substr(1)));
    } catch (std::exception const&) {
      fail("$ref", path, fmt::format("'$ref' {} names nothing in the schema", ref));
    }
    auto const r = g_.rule();  // defined before compiling, so a schema may refer to itself
    refs_.emplace(ref, r);
    g_.define(r, {{grammar::ref(compile(*target, ref.substr(1)))}});
    return r;
  }

  std::int32_t typed(std::string const& t, nlohmann::json const& s, std::string const& path) {
    if (t == "string") {
      auto const lo = count(s, "minLength", 0, path), hi = count(s, "maxLength", -1, path);
      if (hi >= 0 && hi < lo) fail("maxLength", path, "'maxLength' is below 'minLength'");
      if (lo == 0 && hi < 0) return r_.string;
      auto q = lit("\"");
      auto body = q;
      body.push_back(grammar::ref(g_.repeat({grammar::ref(r_.char_)}, lo, hi)));
      body.push_back(q[0]);
      return g_.rule({body});
    }
    if (t == "number") return r_.number;
    if (t == "integer") return r_.integer;
    if (t == "boolean") return g_.rule({lit("true"), lit("false")});
    if (t == "null") return g_.rule({lit("null")});
    if (t == "array") return array(s, path);
    if (t == "object") return object(s, path);
    fail("type", path, fmt::format("unknown type '{}'", t));
  }

  std::int32_t array(nlohmann::json const& s, std::string const& path) {
    auto const lo = count(s, "minItems", 0, path), hi = count(s, "maxItems", -1, path);
    if (hi >= 0 && hi < lo) fail("maxItems", path, "'maxItems' is below 'minItems'");
    auto const item = s.contains("items") ? compile(s["items"], path + "/items") : r_.value;
    auto const ws = grammar::ref(r_.ws);
    sequence first = {grammar::ref(item), ws};
    sequence more = lit(",");
    more.insert(more.end(), {ws, grammar::ref(item), ws});
    sequence open = lit("[");
    open.push_back(ws);
    auto const close = lit("]");
    std::vector<sequence> alts;
    if (lo == 0) alts.push_back(open), alts.back().push_back(close[0]);
    if (hi != 0) {
      auto a = open;
      a.insert(a.end(), first.begin(), first.end());
      a.push_back(
          grammar::ref(g_.repeat(more, std::max<std::int64_t>(lo - 1, 0), hi < 0 ? -1 : hi - 1)));
      a.push_back(close[0]);
      alts.push_back(a);
    }
    return g_.rule(std::move(alts));
  }

  std::int32_t object(nlohmann::json const& s, std::string const& path) {
    auto const& props = s.contains("properties") ? s["properties"] : nlohmann::json::object();
    if (!props.is_object()) fail("properties", path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("required", path, "'required' must be an array");
      for (auto const& r : s["required"]) {
        if (!r.is_string()) fail("required", path, "'required' must hold strings");
        if (!props.contains(r.get<std::string>()))
          fail("required", path,
               fmt::format("required property '{}' has no schema in 'properties'",
                           r.get<std::string>()));
        required.insert(r.get<std::string>());
      }
    }
    bool closed = false;
    if (s.contains("additionalProperties")) {
      auto const& a = s["additionalProperties"];
      if (a.is_boolean())
        closed = !a.get<bool>();
      else if (!(a.is_object() && a.empty()))
        fail("additionalProperties", path,
             "'additionalProperties' must be true or false (a schema is not supported)");
    }
    if (props.empty() && !closed) return r_.object;
    // Members in schema order; head_i: none written yet, tail_i: "," before each.
    auto const ws = grammar::ref(r_.ws);
    std::vector<std::pair<sequence, bool>> members;
    for (auto const& [name, sub] : props.items()) {
      auto m = lit(nlohmann::json(name).dump());
      m.push_back(ws);
      auto colon = lit(":");
      m.insert(m.end(),
               {colon[0], ws, grammar::ref(compile(sub, path + "/properties/" + name)), ws});
      members.emplace_back(std::move(m), required.contains(name));
    }
    std::int32_t head = g_.rule({{}}), tail = head;
    for (auto i = members.size(); i-- > 0;) {
      auto const& [m, req] = members[i];
      auto with_comma = lit(",");
      with_comma.push_back(ws);
      with_comma.insert(with_comma.end(), m.begin(), m.end());
      with_comma.push_back(grammar::ref(tail));
      auto first = m;
      first.push_back(grammar::ref(tail));
      auto const t = req ? g_.rule({with_comma}) : g_.rule({with_comma, {grammar::ref(tail)}});
      head = req ? g_.rule({first}) : g_.rule({first, {grammar::ref(head)}});
      tail = t;
    }
    sequence body = lit("{");
    body.insert(body.end(), {ws, grammar::ref(head)});
    body.push_back(lit("}")[0]);
    return g_.rule({body});
  }

  grammar& g_;
  nlohmann::json const& root_;
  std::map<std::string, std::int32_t> refs_;
  json_rules r_;
};

}  // namespace detail

/// The grammar of JSON texts valid under `schema` (no whitespace before or after the value).
inline std::shared_ptr<grammar> compile_json_schema(nlohmann::json const& schema) {
  auto g = std::make_shared<grammar>();
  detail::schema_compiler c(*g, schema);
  auto const v = c.compile(schema, "#");
  g->set_root(g->rule({{grammar::ref(v)}}));
  g->finish();
  return g;
}

/// The grammar of any JSON object ({"type": "json_object"}).
inline std::shared_ptr<grammar> json_object_grammar() {
  return compile_json_schema(nlohmann::json{{"type", "object"}});
}

}  // namespace tf::grammar
