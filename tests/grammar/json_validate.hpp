#pragma once
// A small JSON Schema validator for the subset tf compiles (type, properties, required,
// additionalProperties, enum, const, items, minItems/maxItems, minLength/maxLength, anyOf,
// local $ref), to check what constrained decoding produced independently of the grammar.
#include <nlohmann/json.hpp>

#include <string>

namespace tf::grammar::test {

inline std::size_t utf8_length(std::string const& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool valid(nlohmann::json const& v, nlohmann::json const& s, nlohmann::json const& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref"))
    return valid(v, root.at(nlohmann::json::json_pointer(s["$ref"].get<std::string>().substr(1))),
                 root);
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool any = false;
    for (auto const& e : s["enum"]) any = any || e == v;
    if (!any) return false;
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (auto const& a : s["anyOf"]) any = any || valid(v, a, root);
    if (!any) return false;
  }
  if (s.contains("type")) {
    auto types = s["type"].is_array() ? s["type"] : nlohmann::json::array({s["type"]});
    bool any = false;
    for (auto const& t : types) {
      any = any || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
            (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
            (t == "integer" && (v.is_number_integer() || v.is_number_unsigned())) ||
            (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    }
    if (!any) return false;
  }
  if (v.is_object()) {
    auto const props = s.value("properties", nlohmann::json::object());
    for (auto const& r : s.value("required", nlohmann::json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (auto const& [k, x] : v.items()) {
      if (props.contains(k)) {
        if (!valid(x, props[k], root)) return false;
      } else if (s.value("additionalProperties", nlohmann::json(true)) == false) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) return false;
    if (s.contains("items"))
      for (auto const& x : v)
        if (!valid(x, s["items"], root)) return false;
  }
  if (v.is_string()) {
    auto const n = utf8_length(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<std::size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<std::size_t>()) return false;
  }
  return true;
}

/// Whether `text` parses as JSON and validates under `schema`.
inline bool parses_and_validates(std::string const& text, nlohmann::json const& schema) {
  auto v = nlohmann::json::parse(text, nullptr, false);
  return !v.is_discarded() && valid(v, schema, schema);
}

}  // namespace tf::grammar::test
