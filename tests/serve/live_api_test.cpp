// The built `serve` binary on the real default model: the OpenAI fields beyond the basics through
// the real openai client (seed, n, logit_bias, echo, a forced tool call through the generic
// fallback, tokenize), --alias, --cors-origin and the sampling-default flags in the start-up
// lines and /v1/models, and
// --chat-template (used when it parses, a start-up error when it does not), and a multi-turn chat
// that reuses each earlier turn whole.
#include <httplib.h>
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
using nlohmann::json;

TEST_CASE("the real model: the openai client's extra fields, --alias, CORS and sampling flags") {
  if (!real_model_ready()) return;
  if (!have_python_openai()) return;
  live_server s({"--parallel", "2", "--context", "2048", "--threads", "2", "--alias", "gemma-test",
                 "--cors-origin", "*", "--temp", "0.7", "--top-k", "30"});
  REQUIRE(s.wait_ready(std::chrono::seconds(180)));
  auto const log = s.log();
  INFO(log);
  CHECK(log.find("sampling defaults: temperature 0.7 (--temp), top_k 30 (--top-k), top_p 0.95 "
                 "(llama-server), min_p 0.05 (llama-server)") != std::string::npos);
  CHECK(log.find("serving gemma-test on http://") != std::string::npos);
  httplib::Client c("127.0.0.1", s.port());
  auto const models = c.Get("/v1/models");
  REQUIRE(models);
  CHECK(models->get_header_value("Access-Control-Allow-Origin") == "*");
  auto const m = json::parse(models->body)["data"][0];
  CHECK(m["id"] == "gemma-test");
  CHECK(m["sampling_defaults"]["temperature"] == json{{"value", 0.7}, {"source", "--temp"}});
  CHECK(m["sampling_defaults"]["top_k"] == json{{"value", 30}, {"source", "--top-k"}});
  check_openai_client(s.base(), "api");
  auto const metrics = c.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("vllm:generation_tokens_total{model_name=\"gemma-test\"} ") !=
        std::string::npos);
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE("the real model: a 5-turn chat runs only each turn's new tokens, replies == fresh") {
  if (!real_model_ready()) return;
  if (!have_python_openai()) return;
  live_server s({"--parallel", "2", "--context", "2048", "--threads", "2"});
  REQUIRE(s.wait_ready(std::chrono::seconds(180)));
  check_openai_client(s.base(), "chat");
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE("the real model: --chat-template replaces the template; one that does not parse stops") {
  if (!real_model_ready()) return;
  auto const dir = fs::temp_directory_path() / ("tf_live_api_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "bad.jinja") << "{% for m in messages %}{{ m.content }";
    live_server s({"--chat-template", (dir / "bad.jinja").string(), "--threads", "1"});
    CHECK_FALSE(s.wait_ready(std::chrono::seconds(60)));
    CHECK(s.stop() == 1);
    auto const log = s.log();
    INFO(log);
    CHECK(log.find("--chat-template " + (dir / "bad.jinja").string() +
                   ": the template does not parse") != std::string::npos);
    CHECK(log.find("tf: loading") == std::string::npos);  // refused before the model loads
  }
  {
    std::ofstream(dir / "plain.jinja")
        << "{% for m in messages %}### {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
           "### assistant:";
    live_server s({"--chat-template", (dir / "plain.jinja").string(), "--parallel", "1",
                   "--context", "1024", "--threads", "2"});
    REQUIRE(s.wait_ready(std::chrono::seconds(180)));
    auto const log = s.log();
    INFO(log);
    CHECK(log.find("chat template from " + (dir / "plain.jinja").string()) != std::string::npos);
    // The default GGUF carries no general.sampling keys: llama-server's defaults.
    CHECK(log.find("sampling defaults: temperature 0.8 (llama-server), top_k 40 (llama-server)") !=
          std::string::npos);
    auto const reply = post_json(s.port(), "/v1/chat/completions",
                                 {{"messages", {{{"role", "user"}, {"content", "Name a colour."}}}},
                                  {"max_tokens", 4},
                                  {"temperature", 0}});
    auto const rendered =
        post_json(s.port(), "/tokenize",
                  {{"content", "### user: Name a colour.\n### assistant:"}, {"add_special", true}});
    CHECK(reply["usage"]["prompt_tokens"] == rendered["tokens"].size());
    CHECK(s.stop() == 0);
    check_census(s.log());
  }
  fs::remove_all(dir);
}
