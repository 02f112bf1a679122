// Tests include/tf/grammar/tool_call.hpp's braced format (Gemma 4's <|tool_call>call:f{k:v}
// <tool_call|>): which calls the grammar takes, for required, optional and nested parameters.
#include <tf/grammar/matcher.hpp>
#include <tf/grammar/tool_call.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace {

using json = nlohmann::json;
using tf::grammar::compile_braced_tool_call;
using tf::grammar::matcher;

std::vector<tf::grammar::tool_signature> const tools = {
    {"get_weather", json::parse(R"({"type": "object", "properties": {
       "city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"},
       "unit": {"enum": ["c", "f"]}}, "required": ["city"]})")},
    {"plan", json::parse(R"({"type": "object", "properties": {
       "stops": {"type": "array", "items": {"type": "string"}},
       "opts": {"type": "object", "properties": {"fast": {"type": "boolean"}}}}})")}};

bool accepts(std::string const& text) {
  auto g = compile_braced_tool_call(tools, "");
  matcher m(*g);
  return m.matches(text);
}

}  // namespace

TEST_CASE("the braced call grammar takes Gemma 4's calls valid under the schema") {
  CHECK(accepts(R"(<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>)"));
  CHECK(accepts(
      R"(<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:3,unit:<|"|>c<|"|>}<tool_call|>)"));
  CHECK(accepts(R"(<|tool_call>call:get_weather{city:<|"|><|"|>,unit:<|"|>f<|"|>}<tool_call|>)"));
  CHECK(accepts(R"(<|tool_call>call:plan{}<tool_call|>)"));
  CHECK(accepts(R"(<|tool_call>call:plan{opts:{fast:true}}<tool_call|>)"));
  CHECK(accepts(R"(<|tool_call>call:plan{opts:{},stops:[<|"|>a<|"|>,<|"|>b<|"|>]}<tool_call|>)"));
  // A required parameter left out, a string over maxLength, an enum miss, JSON quoting,
  // parameters out of sorted order (the template's dictsort), a trailing comma, an unknown tool.
  CHECK_FALSE(accepts(R"(<|tool_call>call:get_weather{days:3}<tool_call|>)"));
  CHECK_FALSE(accepts(R"(<|tool_call>call:get_weather{city:<|"|>Amsterdam<|"|>}<tool_call|>)"));
  CHECK_FALSE(
      accepts(R"(<|tool_call>call:get_weather{city:<|"|>a<|"|>,unit:<|"|>k<|"|>}<tool_call|>)"));
  CHECK_FALSE(accepts(R"(<|tool_call>call:get_weather{city:"Paris"}<tool_call|>)"));
  CHECK_FALSE(accepts(R"(<|tool_call>call:get_weather{days:3,city:<|"|>a<|"|>}<tool_call|>)"));
  CHECK_FALSE(accepts(R"(<|tool_call>call:plan{stops:[],opts:{}}<tool_call|>)"));
  CHECK_FALSE(accepts(R"(<|tool_call>call:plan{opts:{},}<tool_call|>)"));
  CHECK_FALSE(accepts(R"(<|tool_call>call:other{}<tool_call|>)"));
}

TEST_CASE("the braced call grammar refuses a parameter schema it cannot write") {
  std::vector<tf::grammar::tool_signature> const bad = {
      {"f",
       json::parse(R"({"type": "object", "properties": {"x": {"anyOf": [{"type": "string"}]}}})")}};
  CHECK_THROWS_AS(compile_braced_tool_call(bad, ""), tf::grammar::schema_error);
  std::vector<tf::grammar::tool_signature> const not_object = {
      {"f", json::parse(R"({"type": "string"})")}};
  CHECK_THROWS_AS(compile_braced_tool_call(not_object, ""), tf::grammar::schema_error);
}
