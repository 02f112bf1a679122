// Tool calls and the reasoning split: the reply parsers per format (whole, piece by piece,
// malformed), tools and tool-call messages through the real chat templates against jinja2's
// rendering (fixtures/jinja/tool_call_goldens.json, made by
// fixtures/scripts/make_tool_call_goldens.py), and the round trip over HTTP with a scripted model.
#include <tf/serve/openai_request.hpp>
#include <tf/serve/tool_calls_stream.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "../grammar/json_validate.hpp"
#include "http_test_server.hpp"
#include "scripted_model.hpp"

namespace {

using namespace tf::serve;
using tf::serve::test::json;
using ojson = nlohmann::ordered_json;

// The whole reply fed at once, and fed one byte at a time: both must give the same parts.
reply_piece parse_both(std::string const& text, reply_parser const& proto) {
  auto whole = proto;
  auto a = whole.feed(text, true);
  auto bytes = proto;
  reply_piece b;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    auto p = bytes.feed(i < text.size() ? text.substr(i, 1) : std::string(), i == text.size());
    b.reasoning += p.reasoning;
    b.content += p.content;
    for (auto& c : p.calls) b.calls.push_back(c);
  }
  CHECK(a.reasoning == b.reasoning);
  CHECK(a.content == b.content);
  REQUIRE(a.calls.size() == b.calls.size());
  for (std::size_t k = 0; k < a.calls.size(); ++k) {
    CHECK(a.calls[k].name == b.calls[k].name);
    CHECK(a.calls[k].arguments == b.calls[k].arguments);
  }
  return a;
}

ojson const weather_tools = ojson::parse(R"([{"type": "function", "function": {
  "name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}}}}}])");

}  // namespace

TEST_CASE("the format a chat template teaches is detected") {
  auto tmpl = [](char const* f) {
    return test::read_text(std::string(TF_FIXTURES_DIR) + "/jinja/" + f);
  };
  CHECK(detect_tool_format(tmpl("qwen3.jinja")) == tool_format::json_in_tags);
  CHECK(detect_tool_format(tmpl("qwen3_5.jinja")) == tool_format::xml_function);
  CHECK(detect_tool_format(tmpl("nemotron_h.jinja")) == tool_format::xml_function);
  CHECK(detect_tool_format(tmpl("glm4_5.jinja")) == tool_format::glm45);
  CHECK(detect_tool_format(tmpl("gemma3.jinja")) == tool_format::none);
  CHECK(detect_tool_format(tmpl("gemma4.jinja")) == tool_format::call_braces);
}

TEST_CASE("Gemma 4 braced tool calls parse whole and streamed, after its thought channel") {
  reply_parser p(true, false, tool_format::call_braces, weather_tools, "<|channel>thought",
                 "<channel|>");
  auto r = parse_both(
      "<|channel>thought\nThe user wants weather.\n<channel|><|tool_call>call:get_weather{"
      "city:<|\"|>Paris, \"FR\"<|\"|>,days:3}<tool_call|>",
      p);
  CHECK(r.reasoning == "The user wants weather.");
  CHECK(r.content.empty());
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(json::parse(r.calls[0].arguments) == json{{"city", "Paris, \"FR\""}, {"days", 3}});
  // Nested values, two calls, text around them.
  r = parse_both(
      "Let me check. <|tool_call>call:plan{stops:[<|\"|>a<|\"|>,2.5,{x:true}],opt:{k:null}}"
      "<tool_call|><|tool_call>call:get_weather{}<tool_call|>",
      reply_parser(false, false, tool_format::call_braces, weather_tools));
  CHECK(r.content == "Let me check.");
  REQUIRE(r.calls.size() == 2);
  CHECK(json::parse(r.calls[0].arguments) ==
        json::parse(R"({"stops": ["a", 2.5, {"x": true}], "opt": {"k": null}})"));
  CHECK(r.calls[1].arguments == "{}");
  // Text after a call keeps its trailing whitespace, however the reply is cut.
  r = parse_both("<|tool_call>call:f{}<tool_call|>Done.\n",
                 reply_parser(false, false, tool_format::call_braces, weather_tools));
  CHECK(r.content == "Done.\n");
  // Malformed blocks stay content as written: nesting past the limit, a bare string, no "call:",
  // a cut block.
  std::string const deep =
      "<|tool_call>call:f{a:" + std::string(100, '[') + std::string(100, ']') + "}<tool_call|>";
  std::vector<std::string> const bads = {deep, "<|tool_call>call:f{city:Paris}<tool_call|>",
                                         "<|tool_call>f{}<tool_call|>", "<|tool_call>call:f{a:1"};
  for (auto const& bad : bads) {
    INFO(bad);
    r = parse_both(bad, reply_parser(false, false, tool_format::call_braces, weather_tools));
    CHECK(r.calls.empty());
    CHECK(r.content == bad);
  }
}

TEST_CASE("the generic fallback's JSON reply: a call, a response, or text as written") {
  reply_parser const p(false, false, tool_format::generic_json, weather_tools);
  auto r =
      parse_both(R"({"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})", p);
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(json::parse(r.calls[0].arguments) == json{{"city", "Paris"}});
  CHECK(r.content.empty());
  r = parse_both(R"({"response": "It is sunny."})", p);
  CHECK(r.calls.empty());
  CHECK(r.content == "It is sunny.");
  r = parse_both("not json", p);
  CHECK(r.calls.empty());
  CHECK(r.content == "not json");
}

TEST_CASE("Qwen3 JSON tool calls parse whole and streamed; malformed ones stay content") {
  reply_parser p(true, false, tool_format::json_in_tags, weather_tools);
  auto r = parse_both(
      "<think>\nLook it up.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"days\": 2, \"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
      p);
  CHECK(r.reasoning == "Look it up.");
  CHECK(r.content == "Checking.");
  REQUIRE(r.calls.size() == 2);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[0].arguments == R"({"days":2,"city":"Oslo"})");  // the model's key order
  CHECK(r.calls[1].arguments == R"({"city":"Rome"})");

  auto bad = parse_both("Sure <tool_call>\n{\"name\": broken}\n</tool_call> ok", p);
  CHECK(bad.calls.empty());
  CHECK(bad.content == "Sure <tool_call>\n{\"name\": broken}\n</tool_call> ok");
  auto cut = parse_both("<tool_call>\n{\"name\": \"get_weather\", \"argu", p);
  CHECK(cut.calls.empty());
  CHECK(cut.content == "<tool_call>\n{\"name\": \"get_weather\", \"argu");
  auto plain = parse_both("No tools: a < b and <tool_ is not a tag.", p);
  CHECK(plain.content == "No tools: a < b and <tool_ is not a tag.");
  CHECK(plain.calls.empty());
}

TEST_CASE("Qwen3.5 / Nemotron XML tool calls parse with the schema's types") {
  reply_parser p(true, true, tool_format::xml_function, weather_tools);
  auto r = parse_both(
      "Need weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew "
      "York\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n10001\n"
      "</parameter>\n</function>\n</tool_call>",
      p);
  CHECK(r.reasoning == "Need weather.");
  CHECK(r.content.empty());
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].name == "get_weather");
  CHECK(r.calls[0].arguments == R"({"city":"New York","days":3,"zip":"10001"})");
  auto bad =
      parse_both("<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</tool_call>", p);
  CHECK(bad.calls.empty());
  CHECK(bad.reasoning == "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</tool_call>");
}

TEST_CASE("a call's text with invalid UTF-8 parses with U+FFFD in its arguments, never throws") {
  for (auto f : {tool_format::xml_function, tool_format::glm45, tool_format::call_braces}) {
    std::string const reply =
        f == tool_format::xml_function
            ? "<tool_call>\n<function=f>\n<parameter=s>\nx\xD0\n</parameter>\n</function>\n"
              "</tool_call>"
        : f == tool_format::glm45
            ? "<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>x\xD0</arg_value>\n</tool_call>"
            : "<|tool_call>call:f{s:<|\"|>x\xD0<|\"|>}<tool_call|>";
    INFO(to_string(f));
    auto const r = reply_parser(false, false, f, weather_tools).feed(reply, true);
    REQUIRE(r.calls.size() == 1);
    CHECK(json::parse(r.calls[0].arguments) == json{{"s", "x\xEF\xBF\xBD"}});
  }
}

TEST_CASE("GLM-4.5 tool calls parse") {
  reply_parser p(true, false, tool_format::glm45, weather_tools);
  auto r = parse_both(
      "<think>hmm</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
      "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
      p);
  CHECK(r.reasoning == "hmm");
  CHECK(r.content.empty());
  REQUIRE(r.calls.size() == 1);
  CHECK(r.calls[0].arguments == R"({"city":"Paris","days":2})");
  CHECK(parse_both("<tool_call>get_weather\n<arg_key>city</arg_key>\nParis</tool_call>", p)
            .calls.empty());
}

TEST_CASE("the reasoning split: opened by the reply or the prompt, cut, or off") {
  CHECK(parse_both("<think>\nabc\n</think>\n\nHello", reply_parser(true, false, {}, {})).content ==
        "Hello");
  auto in = parse_both("abc</think>Hi", reply_parser(true, true, {}, {}));
  CHECK(in.reasoning == "abc");
  CHECK(in.content == "Hi");
  auto cut = parse_both("<think>still thinking\n", reply_parser(true, false, {}, {}));
  CHECK(cut.reasoning == "still thinking");
  CHECK(cut.content.empty());
  auto no = parse_both("Hello <think>x</think>", reply_parser(true, false, {}, {}));
  CHECK(no.content == "Hello <think>x</think>");
  CHECK(parse_both("<think>x</think>y", reply_parser()).content == "<think>x</think>y");
  CHECK(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  CHECK(!prompt_opens_thinking("assistant\n<think>\n\n</think>\n\n"));
}

TEST_CASE("tools and tool-call messages render through the templates as jinja2 renders them") {
  auto const g =
      json::parse(test::read_text(std::string(TF_FIXTURES_DIR) + "/jinja/tool_call_goldens.json"));
  REQUIRE(g["cases"].size() >= 8);
  for (auto const& c : g["cases"]) {
    INFO(c["name"].get<std::string>());
    auto const tmpl = test::read_text(std::string(TF_FIXTURES_DIR) + "/jinja/" +
                                      c["template_file"].get<std::string>());
    auto const r = parse_openai_request(c["body"].get<std::string>(), true);
    auto opts = chat_template_options(r);
    opts["add_generation_prompt"] = true;
    opts["bos_token"] = "";
    opts["eos_token"] = "";
    CHECK(tf::tokenizer::render_chat<ojson>(tmpl, r.messages, opts) ==
          c["text"].get<std::string>());
  }
}

namespace {

// An in-process server whose model answers from scripts, its prompts rendered by a template.
struct scripted_server {
  scripted_server(std::string const& template_file, std::vector<test::script_line> s) {
    auto inner = std::make_shared<test::toy_served>(
        std::make_unique<toy_model>(128, 16),
        toy_codec{test::read_text(std::string(TF_FIXTURES_DIR) + "/jinja/" + template_file)},
        host_config{4, 8192, 4, 64});
    model = std::make_shared<test::scripted_model>(inner, std::move(s));
    srv.server->set_model(model);
  }
  test::live_server srv{{}, {4, 8192, 4, 64}, 0};
  std::shared_ptr<test::scripted_model> model;
};

std::string const call_reply =
    "The user wants weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
    "</function>\n</tool_call>";

json golden(std::string const& name) {
  auto const g =
      json::parse(test::read_text(std::string(TF_FIXTURES_DIR) + "/jinja/tool_call_goldens.json"));
  for (auto const& c : g["cases"])
    if (c["name"] == name) return c;
  FAIL("no golden " << name);
  return {};
}

json post_ordered(httplib::Client& c, ojson const& body, int status) {
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  REQUIRE(r);
  INFO(r->body);
  CHECK(r->status == status);
  return json::parse(r->body);
}

}  // namespace

TEST_CASE("a tool call round trip over HTTP: tool_calls out, the tool result rendered back in") {
  scripted_server s("qwen3_5.jinja",
                    {{"<tool_response>", "Sunny.\n</think>\n\nIt is 21 C."}, {"", call_reply}});
  auto c = s.srv.client();
  auto first = golden("qwen3_5.jinja:tools_offered");
  // Bodies as ordered JSON: the client's key order is what the template must see.
  auto body = ojson::parse(first["body"].get<std::string>());
  auto r = post_ordered(c, body, 200);
  // The template got the tools in the client's key order: the prompt is jinja2's, byte for byte.
  REQUIRE(s.model->prompts().size() == 1);
  CHECK(s.model->prompts()[0] == first["text"].get<std::string>());
  auto const& choice = r["choices"][0];
  CHECK(choice["finish_reason"] == "tool_calls");
  auto const& msg = choice["message"];
  CHECK(msg["content"].is_null());
  CHECK(msg["reasoning_content"] == "The user wants weather.");
  REQUIRE(msg["tool_calls"].size() == 1);
  auto const& tc = msg["tool_calls"][0];
  CHECK(tc["type"] == "function");
  CHECK(tc["id"].get<std::string>().starts_with("call_"));
  CHECK(tc["function"]["name"] == "get_weather");
  CHECK(json::parse(tc["function"]["arguments"].get<std::string>()) ==
        json{{"city", "Paris"}, {"days", 3}});

  // The client sends the reply back with the tool's result, as the golden's second turn.
  auto second = golden("qwen3_5.jinja:tool_result");
  auto body2 = ojson::parse(second["body"].get<std::string>());
  auto assistant = ojson::parse(msg.dump());
  assistant["content"] = "";
  assistant["tool_calls"][0]["id"] = "call_1";
  body2["messages"][2] = assistant;
  auto r2 = post_ordered(c, body2, 200);
  REQUIRE(s.model->prompts().size() == 2);
  CHECK(s.model->prompts()[1] == second["text"].get<std::string>());
  CHECK(r2["choices"][0]["finish_reason"] == "stop");
  CHECK(r2["choices"][0]["message"]["content"] == "It is 21 C.");
  CHECK(r2["choices"][0]["message"]["reasoning_content"] == "Sunny.");
  CHECK(!r2["choices"][0]["message"].contains("tool_calls"));
}

TEST_CASE("streamed tool calls and reasoning arrive as their own deltas") {
  scripted_server s("qwen3_5.jinja", {{"", call_reply}});
  auto c = s.srv.client();
  auto body = json::parse(golden("qwen3_5.jinja:tools_offered")["body"].get<std::string>());
  body["stream"] = true;
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  std::string reasoning, content, name, args, finish;
  int heads = 0;
  for (auto const& e : test::sse_events(res->body)) {
    if (e == "[DONE]") break;
    auto j = json::parse(e);
    for (auto const& ch : j["choices"]) {
      auto const& d = ch["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content") && d["content"].is_string())
        content += d["content"].get<std::string>();
      if (d.contains("tool_calls"))
        for (auto const& tc : d["tool_calls"]) {
          CHECK(tc["index"] == 0);
          if (tc.contains("id")) {
            ++heads;
            name += tc["function"]["name"].get<std::string>();
          }
          args += tc["function"]["arguments"].get<std::string>();
        }
      if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    }
  }
  CHECK(reasoning == "The user wants weather.");
  CHECK(content.empty());
  CHECK(heads == 1);
  CHECK(name == "get_weather");
  CHECK(json::parse(args) == json{{"city", "Paris"}, {"days", 3}});
  CHECK(finish == "tool_calls");
}

namespace {

json const trip_tools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
    "required": ["city", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "book_trip", "parameters": {"type": "object",
    "properties": {"to": {"enum": ["Rome", "Oslo"]}, "nights": {"type": "integer"}},
    "required": ["to"], "additionalProperties": false}}}])");

// A server that samples (the toy model over its byte vocabulary) under a real chat template.
struct sampling_server {
  explicit sampling_server(std::string const& template_file) {
    srv.server->set_model(std::make_shared<test::toy_served>(
        std::make_unique<toy_model>(256, 16),
        toy_codec{test::read_text(std::string(TF_FIXTURES_DIR) + "/jinja/" + template_file)},
        host_config{4, 4096, 8, 64}));
  }
  test::live_server srv{{}, {4, 4096, 8, 64}, 0};
};

json forced_body(json const& choice, std::uint64_t seed) {
  return {{"messages", {{{"role", "user"}, {"content", "plan a trip"}}}},
          {"tools", trip_tools},
          {"tool_choice", choice},
          {"max_tokens", 400},
          {"temperature", 1.0},
          {"seed", seed}};
}

}  // namespace

TEST_CASE("tool_choice required or named: every reply is a call whose arguments validate") {
  // JSON in tags (Qwen3), XML parameters (Qwen3.5; after the thinking part the prompt opened)
  // and GLM-4.5's tagged parameters.
  // Gemma 4's braced calls, and Gemma 3's template (no call format) through the generic fallback.
  auto const file = GENERATE(as<std::string>{}, "qwen3.jinja", "qwen3_5.jinja", "glm4_5.jinja",
                             "gemma4.jinja", "gemma3.jinja");
  INFO(file);
  sampling_server s(file);
  auto c = s.srv.client();
  json const named = {{"type", "function"}, {"function", {{"name", "book_trip"}}}};
  int calls = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    for (auto const& choice : {json("required"), named}) {
      auto r = test::post(c, "/v1/chat/completions", forced_body(choice, seed), 200);
      auto const& ch = r["choices"][0];
      INFO("seed " << seed << " tool_choice " << choice.dump() << ": " << ch.dump());
      if (ch["finish_reason"] == "length") continue;  // cut short, as OpenAI's can be
      REQUIRE(ch["finish_reason"] == "tool_calls");
      REQUIRE(ch["message"]["tool_calls"].size() == 1);
      auto const& f = ch["message"]["tool_calls"][0]["function"];
      auto const name = f["name"].get<std::string>();
      if (choice.is_object()) CHECK(name == "book_trip");
      auto const& params = trip_tools[name == "get_weather" ? 0 : 1]["function"]["parameters"];
      CHECK(tf::grammar::test::parses_and_validates(f["arguments"].get<std::string>(), params));
      ++calls;
    }
  }
  CHECK(calls >= 36);
  // Streamed, the call arrives as tool_calls deltas.
  auto body = forced_body("required", 3);
  body["stream"] = true;
  auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
  REQUIRE(res);
  INFO(res->status << " " << res->body);
  std::string finish;
  int heads = 0;
  for (auto const& e : test::sse_events(res->body)) {
    if (e == "[DONE]") break;
    auto const j = json::parse(e);
    for (auto const& ch : j["choices"]) {
      if (ch["delta"].contains("tool_calls")) heads += ch["delta"]["tool_calls"][0].contains("id");
      if (ch["finish_reason"].is_string()) finish = ch["finish_reason"];
    }
  }
  CHECK(heads == 1);
  CHECK(finish == "tool_calls");
  // A name not in tools, a forced call with response_format, and no tools are 400s.
  auto bad = forced_body({{"type", "function"}, {"function", {{"name", "nope"}}}}, 1);
  CHECK(test::post(c, "/v1/chat/completions", bad, 400)["error"]["param"] == "tool_choice");
  bad = forced_body("required", 1);
  bad["response_format"] = {{"type", "json_object"}};
  CHECK(test::post(c, "/v1/chat/completions", bad, 400)["error"]["param"] == "tool_choice");
  bad = forced_body("required", 1);
  bad.erase("tools");
  CHECK(test::post(c, "/v1/chat/completions", bad, 400)["error"]["param"] == "tool_choice");
}

TEST_CASE("tool_choice: none leaves calls as content; a tool without a name is refused") {
  scripted_server s("qwen3_5.jinja", {{"", call_reply}});
  auto c = s.srv.client();
  auto body = json::parse(golden("qwen3_5.jinja:tools_offered")["body"].get<std::string>());
  body["tool_choice"] = "none";
  auto r = test::post(c, "/v1/chat/completions", body, 200);
  CHECK(r["choices"][0]["finish_reason"] == "stop");
  CHECK(r["choices"][0]["message"]["content"].get<std::string>().starts_with("<tool_call>"));
  CHECK(!r["choices"][0]["message"].contains("tool_calls"));
  body.erase("tool_choice");
  body["tools"] = json{{{"type", "function"}, {"function", {{"description", "no name"}}}}};
  CHECK(test::post(c, "/v1/chat/completions", body, 400)["error"]["param"] ==
        "tools[0].function.name");
}

TEST_CASE("enable_thinking false: the reply is all content") {
  scripted_server s("qwen3_5.jinja", {{"", "Plain answer."}});
  auto c = s.srv.client();
  auto body = test::chat_body("hi", 50);
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto r = test::post(c, "/v1/chat/completions", body, 200);
  CHECK(r["choices"][0]["message"]["content"] == "Plain answer.");
  CHECK(!r["choices"][0]["message"].contains("reasoning_content"));
  body["chat_template_kwargs"] = {{"enable_thinking", true}};
  r = test::post(c, "/v1/chat/completions", body, 200);
  CHECK(r["choices"][0]["message"]["reasoning_content"] == "Plain answer.");
  CHECK(r["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("Gemma 4 over HTTP: its thought channel is reasoning_content, its calls tool_calls") {
  std::string const reply =
      "<|channel>thought\nThe user wants weather.<channel|><|tool_call>call:get_weather{city:"
      "<|\"|>Paris<|\"|>,days:3}<tool_call|>";
  scripted_server s("gemma4.jinja", {{"", reply}});
  auto c = s.srv.client();
  auto body = json::parse(golden("gemma4.jinja:tools_offered")["body"].get<std::string>());
  body["chat_template_kwargs"] = {{"enable_thinking", true}};
  auto r = test::post(c, "/v1/chat/completions", body, 200);
  auto const& m = r["choices"][0]["message"];
  INFO(r.dump());
  CHECK(m["reasoning_content"] == "The user wants weather.");
  CHECK(m["content"].is_null());
  REQUIRE(m["tool_calls"].size() == 1);
  CHECK(m["tool_calls"][0]["function"]["name"] == "get_weather");
  CHECK(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()) ==
        json{{"city", "Paris"}, {"days", 3}});
  CHECK(r["choices"][0]["finish_reason"] == "tool_calls");
  // Thinking off: the prompt closes an empty channel, so the reply is all content.
  scripted_server plain("gemma4.jinja", {{"", "Plain answer."}});
  auto c2 = plain.srv.client();
  auto off = test::chat_body("hi", 50);
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  r = test::post(c2, "/v1/chat/completions", off, 200);
  CHECK(r["choices"][0]["message"]["content"] == "Plain answer.");
  CHECK(!r["choices"][0]["message"].contains("reasoning_content"));
}
