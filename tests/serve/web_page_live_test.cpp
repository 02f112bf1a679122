// The chat page in a real browser (headless Chromium driven by Selenium,
// tests/serve/web_page_check.py) against the real serve binary: the Qwen3.5 tiny fixture with its
// chat template (chat, streaming, the live panel, stop, then a balanced census), the same with
// --api-key (the key prompt), toy_serve with a scripted reply (reasoning folded, a tool call shown
// as one) and with a slow load (the loading bar), and the default model, a base model (completion
// mode, the start's progress lines, the screenshot docs/serving.md shows).
#include <tests/serve/live_server.hpp>

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace tf::test::live;

namespace {

bool have_browser() {
  if (!fs::exists("/usr/bin/chromium") || !fs::exists("/usr/bin/chromedriver"))
    return cannot_run(
        "Chromium or chromedriver is not installed (Debian: chromium chromium-driver)");
  if (std::system("python3 -c 'import selenium' >/dev/null 2>&1") != 0)
    return cannot_run("python3 has no selenium package");
  return true;
}

// Runs the page check in `mode`; it exits 0 and prints "ok" last when every check passed.
void check_page(std::string const& args) {
  int rc = 0;
  auto const out = run_capture(
      "timeout 120 python3 " TF_SOURCE_DIR "/tests/serve/web_page_check.py " + args, rc);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.ends_with("ok\n"));
}

std::vector<std::string> tiny_chat_args() {
  fs::path const root = TF_FIXTURES_DIR;
  // A window long enough for a reply that runs while the page watches it.
  return {(root / "qwen/tiny35/tiny-f32.gguf").string(),
          "--chat-template",
          (root / "jinja/qwen3_5.jinja").string(),
          "--parallel",
          "2",
          "--context",
          "65536",
          "--threads",
          "1",
          "--prompt-cache-gib",
          "0.01"};
}

}  // namespace

TEST_CASE("the chat page streams, shows the ledger live, stops, and the census balances") {
  REQUIRE(fs::exists(serve_binary()));
  if (!have_browser()) return;
  live_server s(tiny_chat_args());
  REQUIRE(s.wait_ready(std::chrono::seconds(60)));
  check_page("chat " + s.base() + " --screenshot " + TF_BINARY_DIR + "/serve-page-chat.png");
  INFO(s.log());
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE("with --api-key the page asks for the key and says when it is refused") {
  REQUIRE(fs::exists(serve_binary()));
  if (!have_browser()) return;
  auto args = tiny_chat_args();
  args.insert(args.end(), {"--api-key", "page-test-key"});
  live_server s(args);
  REQUIRE(s.wait_ready(std::chrono::seconds(60)));
  check_page("apikey " + s.base() + " page-test-key");
  CHECK(s.stop() == 0);
}

TEST_CASE("a reply's reasoning is shown folded and its tool call as a call (scripted toy)") {
  REQUIRE(fs::exists(toy_binary()));
  if (!have_browser()) return;
  auto const script =
      fs::temp_directory_path() / ("tf_page_script_" + std::to_string(::getpid()) + ".json");
  nlohmann::json const lines = {
      {{"when", ""},
       {"reply",
        "The user wants weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>"}}};
  std::ofstream(script) << lines.dump();
  {
    live_server s({"--chat-template", std::string(TF_FIXTURES_DIR) + "/jinja/qwen3_5.jinja",
                   "--script", script.string()},
                  toy_binary());
    REQUIRE(s.wait_ready(std::chrono::seconds(60)));
    check_page("tools " + s.base());
    CHECK(s.stop() == 0);
  }
  fs::remove(script);
}

TEST_CASE("while the model loads the page shows /health's progress, then is ready") {
  REQUIRE(fs::exists(toy_binary()));
  if (!have_browser()) return;
  live_server s({"--load-ms", "5000"}, toy_binary());
  // The port from the listening line: /health answers 503 until the toy's load ends.
  std::smatch m;
  std::string log;
  for (int i = 0;
       i < 100 && !std::regex_search(log, m, std::regex(R"(listening on http://[^:]+:(\d+))"));
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log = s.log();
  }
  REQUIRE(m.size() == 2);
  check_page("loading http://127.0.0.1:" + m[1].str());
  REQUIRE(s.wait_ready(std::chrono::seconds(30)));
  CHECK(s.stop() == 0);
}

TEST_CASE("a base model opens the page in completion mode; the start prints its read") {
  if (!real_model_ready()) return;
  if (!have_browser()) return;
  live_server s({default_model, "--parallel", "1", "--context", "1024", "--load", "read"});
  REQUIRE(s.wait_ready(std::chrono::seconds(120)));
  // A log is not a terminal: the read's lines end in newlines, no carriage returns.
  auto const start = s.log();
  INFO(start);
  CHECK(std::regex_search(start, std::regex(R"(tf: read \d+\.\d\d MiB of weights in \d+\.\d s)")));
  CHECK(start.find('\r') == std::string::npos);
  check_page("completion " + s.base() + " --screenshot " + TF_BINARY_DIR + "/serve-page.png");
  CHECK(fs::file_size(fs::path(TF_BINARY_DIR) / "serve-page.png") > 10000);
  CHECK(s.stop() == 0);
  check_census(s.log());
}
