// Tests include/tf/serve/chat_format.hpp: the reasoning tags read from a template's text, and the
// generic fallback's messages (tools in the system message, calls and results as plain turns)
// rendering through a template that knows no tools.
#include <tf/serve/chat_format.hpp>
#include <tf/tokenizer/chat_template.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace {

using ojson = nlohmann::ordered_json;

std::string read_template(std::string const& name) {
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/jinja/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ojson const tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

}  // namespace

TEST_CASE("reasoning tags come from the template's text") {
  using tf::serve::detect_reasoning_tags;
  for (auto const* f : {"qwen3.jinja", "qwen3_5.jinja", "glm4_5.jinja", "nemotron_h.jinja"}) {
    INFO(f);
    auto const t = detect_reasoning_tags(read_template(f));
    REQUIRE(t);
    CHECK(t->open == "<think>");
    CHECK(t->close == "</think>");
  }
  auto const g4 = detect_reasoning_tags(read_template("gemma4.jinja"));
  REQUIRE(g4);
  CHECK(g4->open == "<|channel>thought");
  CHECK(g4->close == "<channel|>");
  CHECK_FALSE(detect_reasoning_tags(read_template("gemma3.jinja")));
}

TEST_CASE("the generic fallback describes the tools in the system message") {
  auto const messages = ojson::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  auto const out = tf::serve::generic_tool_messages(messages, tools, true);
  REQUIRE(out.size() == 4);
  CHECK(out[0]["role"] == "system");
  auto const system = out[0]["content"].get<std::string>();
  CHECK(system.starts_with("Be brief.\n\nYou can call any of the following tools"));
  CHECK(system.find("\"get_weather\"") != std::string::npos);
  CHECK(system.find("`tool_call`") != std::string::npos);
  CHECK(system.find("`response`") == std::string::npos);  // forced: a call, never an answer
  CHECK(out[2]["role"] == "assistant");
  CHECK(ojson::parse(out[2]["content"].get<std::string>()) ==
        ojson::parse(R"({"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})"));
  CHECK(out[3]["role"] == "user");
  CHECK(ojson::parse(out[3]["content"].get<std::string>())["tool_response"] == "sunny");
  // Gemma 3's template (no tool roles) renders them: roles alternate.
  auto const text =
      tf::tokenizer::render_chat<ojson>(read_template("gemma3.jinja"), out,
                                        ojson{{"add_generation_prompt", true}, {"bos_token", ""}});
  CHECK(text.find("<start_of_turn>user\nBe brief.\n\nYou can call") != std::string::npos);
  CHECK(text.ends_with("<start_of_turn>model\n"));
  // "auto" offers the answer form too; without a system message one is added first.
  auto const auto_out = tf::serve::generic_tool_messages(ojson::array({messages[1]}), tools, false);
  REQUIRE(auto_out.size() == 2);
  CHECK(auto_out[0]["content"].get<std::string>().starts_with("You can call"));
  CHECK(auto_out[0]["content"].get<std::string>().find("`response`") != std::string::npos);
}
