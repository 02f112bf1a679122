#include <tf/grammar/json_schema.hpp>
#include <tf/grammar/matcher.hpp>
#include <tf/grammar/response_format.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

using nlohmann::json;
using tf::grammar::compile_json_schema;
using tf::grammar::matcher;

namespace {

bool accepts(json const& schema, std::string const& text) {
  auto g = compile_json_schema(schema);
  matcher m(*g);
  return m.matches(text);
}

std::string refused_keyword(json const& schema) {
  try {
    compile_json_schema(schema);
  } catch (tf::grammar::schema_error const& e) {
    return e.keyword;
  }
  return {};
}

}  // namespace

TEST_CASE("json_object accepts any JSON object and nothing else") {
  auto g = tf::grammar::json_object_grammar();
  matcher m(*g);
  CHECK(m.matches("{}"));
  CHECK(m.matches("{\"a\": [1, 2.5e-3, -0, true, null, {\"b\": \"x\\n\\u00e9\"}]}"));
  CHECK(m.matches("{\n  \"k\": \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"\n}"));
  CHECK_FALSE(m.matches("[]"));
  CHECK_FALSE(m.matches("{\"a\": 01}"));
  CHECK_FALSE(m.matches("{\"a\": 1,}"));
  CHECK_FALSE(m.matches("{\"a\" 1}"));
  CHECK_FALSE(m.matches("{\"a\": \"\x01\"}"));
  CHECK_FALSE(m.matches("{\"a\": \"\xc3\"}"));          // a cut UTF-8 sequence
  CHECK_FALSE(m.matches("{\"a\": \"\xed\xa0\x80\"}"));  // a surrogate in UTF-8
  CHECK_FALSE(m.matches("{} "));
  CHECK_FALSE(m.matches("{"));
}

TEST_CASE("an object schema fixes its properties, required ones and their order") {
  json s = {{"type", "object"},
            {"properties",
             {{"name", {{"type", "string"}}},
              {"age", {{"type", "integer"}}},
              {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}}}}},
            {"required", {"name", "age"}},
            {"additionalProperties", false}};
  // nlohmann orders keys alphabetically: age, name, tags.
  CHECK(accepts(s, R"({"age": 3, "name": "x"})"));
  CHECK(accepts(s, R"({"age":3,"name":"x","tags":["a","b"]})"));
  CHECK_FALSE(accepts(s, R"({"name": "x"})"));
  CHECK_FALSE(accepts(s, R"({"age": 3.5, "name": "x"})"));
  CHECK_FALSE(accepts(s, R"({"age": 3, "name": "x", "other": 1})"));
  CHECK_FALSE(accepts(s, R"({"age": 3, "name": 4})"));
  json opt = {{"type", "object"},
              {"properties", {{"a", {{"type", "boolean"}}}, {"b", {{"type", "null"}}}}},
              {"additionalProperties", false}};
  CHECK(accepts(opt, "{}"));
  CHECK(accepts(opt, R"({"b": null})"));
  CHECK(accepts(opt, R"({"a": false, "b": null})"));
  CHECK_FALSE(accepts(opt, R"({, "b": null})"));
  CHECK_FALSE(accepts(opt, R"({"a": true,})"));
}

TEST_CASE("enum, const, anyOf, type lists, array bounds, string lengths") {
  CHECK(accepts({{"enum", {"red", 1, nullptr}}}, "\"red\""));
  CHECK(accepts({{"enum", {"red", 1, nullptr}}}, "null"));
  CHECK_FALSE(accepts({{"enum", {"red", 1, nullptr}}}, "\"blue\""));
  CHECK(accepts({{"const", {{"k", 1}}}}, R"({"k":1})"));
  json any = {{"anyOf", {{{"type", "integer"}}, {{"type", "string"}, {"maxLength", 2}}}}};
  CHECK(accepts(any, "12"));
  CHECK(accepts(any, "\"ab\""));
  CHECK_FALSE(accepts(any, "\"abc\""));
  CHECK(accepts({{"type", {"number", "null"}}}, "-1.5e+10"));
  CHECK(accepts({{"type", {"number", "null"}}}, "null"));
  json arr = {
      {"type", "array"}, {"items", {{"type", "integer"}}}, {"minItems", 2}, {"maxItems", 3}};
  CHECK_FALSE(accepts(arr, "[1]"));
  CHECK(accepts(arr, "[1, 2]"));
  CHECK(accepts(arr, "[1,2,3]"));
  CHECK_FALSE(accepts(arr, "[1,2,3,4]"));
  CHECK(accepts({{"type", "array"}, {"maxItems", 0}}, "[]"));
  CHECK_FALSE(accepts({{"type", "array"}, {"maxItems", 0}}, "[1]"));
  CHECK(accepts({{"type", "string"}, {"minLength", 1}}, "\"\\u00e9\""));
  CHECK_FALSE(accepts({{"type", "string"}, {"minLength", 1}}, "\"\""));
}

TEST_CASE("local $ref into $defs, recursive too") {
  json s = json::parse(R"({
    "$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})");
  CHECK(accepts(s, R"({"kids": [{"v": 2}, {"kids": [], "v": 3}], "v": 1})"));
  CHECK_FALSE(accepts(s, R"({"kids": [{"w": 2}], "v": 1})"));
}

TEST_CASE("unsupported keywords and malformed schemas are refused by name") {
  CHECK(refused_keyword({{"type", "string"}, {"pattern", "^a"}}) == "pattern");
  CHECK(refused_keyword({{"type", "string"}, {"format", "date"}}) == "format");
  CHECK(refused_keyword({{"type", "integer"}, {"minimum", 0}}) == "minimum");
  CHECK(refused_keyword({{"oneOf", json::array({json::object()})}}) == "oneOf");
  CHECK(refused_keyword(
            {{"type", "object"}, {"properties", {{"a", {{"allOf", json::array()}}}}}}) == "allOf");
  CHECK(refused_keyword({{"type", "wat"}}) == "type");
  CHECK(refused_keyword({{"$ref", "#/$defs/missing"}}) == "$ref");
  CHECK(refused_keyword({{"$ref", "http://x/y.json"}}) == "$ref");
  CHECK(refused_keyword({{"enum", json::array()}}) == "enum");
  CHECK(refused_keyword({{"type", "object"}, {"required", {"x"}}}) == "required");
  CHECK(refused_keyword({{"type", "object"}, {"additionalProperties", {{"type", "string"}}}}) ==
        "additionalProperties");
  CHECK(refused_keyword({{"type", "array"}, {"minItems", 3}, {"maxItems", 1}}) == "maxItems");
  CHECK(refused_keyword(json(42)) == "schema");
}

TEST_CASE("response_format parsing") {
  using tf::grammar::parse_response_format;
  CHECK_FALSE(parse_response_format(json{{"type", "text"}}).rules);
  CHECK(parse_response_format(json{{"type", "json_object"}}).rules);
  auto f = parse_response_format(
      json{{"type", "json_schema"},
           {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", {{"type", "integer"}}}}}});
  REQUIRE(f.rules);
  CHECK(matcher(*f.rules).matches("42"));
  CHECK_THROWS_AS(parse_response_format(json{{"type", "xml"}}), tf::grammar::schema_error);
  CHECK_THROWS_AS(parse_response_format(json{{"type", "json_schema"}}), tf::grammar::schema_error);
  CHECK_THROWS_AS(parse_response_format(json("json")), tf::grammar::schema_error);
}
