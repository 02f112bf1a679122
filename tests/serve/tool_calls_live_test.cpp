// The openai client against toy_serve with the Qwen3.5 and Gemma 4 chat templates and a scripted
// model (its replies known, so the parsing is what is tested): tool_calls and reasoning_content,
// whole and streamed, and the tool result sent back for the final answer.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <tests/serve/live_server.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace tf::test::live;

TEST_CASE("the openai client parses tool_calls and reasoning_content from a scripted toy") {
  REQUIRE(fs::exists(toy_binary()));
  if (!have_python_openai()) return;
  auto const script =
      fs::temp_directory_path() / ("tf_tool_script_" + std::to_string(::getpid()) + ".json");
  // Each template's own call format and reasoning tags; the second turn is told by its tool
  // result in the prompt.
  auto const file = GENERATE(as<std::string>{}, "qwen3_5.jinja", "gemma4.jinja");
  INFO(file);
  nlohmann::json const qwen_lines = {
      {{"when", "<tool_response>"},
       {"reply", "It is sunny.\n</think>\n\nIt is 21 C and sunny in Paris."}},
      {{"when", ""},
       {"reply",
        "The user wants weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>"}}};
  nlohmann::json const gemma_lines = {
      {{"when", "<|tool_response>response:"}, {"reply", "It is 21 C and sunny in Paris."}},
      {{"when", ""},
       {"reply",
        "<|channel>thought\nThe user wants weather.<channel|><|tool_call>call:get_weather{"
        "city:<|\"|>Paris<|\"|>,days:3}<tool_call|>"}}};
  auto const& lines = file == "gemma4.jinja" ? gemma_lines : qwen_lines;
  std::ofstream(script) << lines.dump();
  {
    live_server s({"--chat-template", std::string(TF_FIXTURES_DIR) + "/jinja/" + file, "--script",
                   script.string(), "--context", "8192"},
                  toy_binary());
    REQUIRE(s.wait_ready(std::chrono::seconds(60)));
    INFO(s.log());
    check_openai_client(s.base(), "tools");
  }
  fs::remove(script);
}
