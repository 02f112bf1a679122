// The built `serve` binary on the real default model with n-gram drafts (the default): every reply
// is the reply of the same request with "draft": false, token for token (greedy, seeded at
// temperature 0.8 with top-k / top-p, and a json_schema request), alone and 8 at once; drafts are
// made and accepted on repetitive text, and the usage and /metrics count them.
#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <tests/serve/live_server.hpp>

#include <chrono>
#include <filesystem>
#include <future>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace tf::test::live;
using nlohmann::json;

namespace {

json post_chat(int port, json const& body) {
  return post_json(port, "/v1/chat/completions", body);
}

std::string const code = R"(def total(items):
    result = 0
    for item in items:
        if item.price > 0:
            result += item.price * item.count
    return result

def average(items):
    if not items:
        return 0
    return total(items) / len(items)
)";

// Eight requests: a repetitive rewrite and free text, greedy and seeded, one json_schema.
std::vector<json> requests() {
  std::vector<json> out;
  auto chat = [](std::string const& text, int max_tokens) {
    return json{{"messages", json::array({{{"role", "user"}, {"content", text}}})},
                {"max_tokens", max_tokens},
                {"temperature", 0}};
  };
  auto const rewrite =
      "Rewrite this code with the variable `result` renamed to `acc`. Reply with the code "
      "only.\n\n" +
      code;
  out.push_back(chat(rewrite, 48));
  out.push_back(chat("Write two sentences about the sea.", 32));
  auto seeded = chat(rewrite, 32);
  seeded["temperature"] = 0.8;
  seeded["top_k"] = 40;
  seeded["top_p"] = 0.9;
  seeded["seed"] = 7;
  out.push_back(seeded);
  auto free_seeded = chat("Tell me about your favourite city.", 32);
  free_seeded["temperature"] = 0.8;
  free_seeded["seed"] = 3;
  out.push_back(free_seeded);
  auto schema = chat("Give a person's name and age as JSON.", 32);
  schema["response_format"] = {
      {"type", "json_schema"},
      {"json_schema",
       {{"name", "person"},
        {"schema",
         {{"type", "object"},
          {"properties", {{"name", {{"type", "string"}}}, {"age", {{"type", "integer"}}}}},
          {"required", {"name", "age"}}}}}}};
  out.push_back(schema);
  auto repeat =
      chat("Repeat exactly, three times: the quick brown fox jumps over the lazy dog.", 40);
  out.push_back(repeat);
  auto logprobs = chat(rewrite, 24);
  logprobs["logprobs"] = true;
  logprobs["top_logprobs"] = 2;
  out.push_back(logprobs);
  auto penalised = chat(rewrite, 24);
  penalised["temperature"] = 0.7;
  penalised["seed"] = 11;
  penalised["frequency_penalty"] = 0.5;
  out.push_back(penalised);
  return out;
}

std::uint64_t metric(std::string const& text, std::string const& name) {
  std::smatch m;
  std::regex const line(name + R"(\{[^}]*\} (\d+))");
  REQUIRE(std::regex_search(text, m, line));
  return std::stoull(m[1]);
}

}  // namespace

TEST_CASE("the real model: drafted replies equal \"draft\": false replies, alone and 8 at once") {
  if (!real_model_ready()) return;
  live_server s({default_model, "--parallel", "8", "--context", "1024", "--threads", "2"});
  REQUIRE(s.wait_ready(std::chrono::seconds(120)));
  CHECK(s.log().find("tf: speculative drafts: ngram") != std::string::npos);
  auto const reqs = requests();

  std::vector<json> plain;
  for (auto r : reqs) {
    r["draft"] = false;
    auto const reply = post_chat(s.port(), r);
    CHECK(reply["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] == 0);
    CHECK(reply["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] == 0);
    plain.push_back(reply);
  }
  // Alone, drafts on (the server's default).
  std::size_t accepted = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i << ": " << reqs[i].dump());
    auto const reply = post_chat(s.port(), reqs[i]);
    CHECK(reply["tf"]["token_sha"] == plain[i]["tf"]["token_sha"]);
    CHECK(reply["choices"][0]["message"] == plain[i]["choices"][0]["message"]);
    if (reqs[i].contains("logprobs"))
      CHECK(reply["choices"][0]["logprobs"] == plain[i]["choices"][0]["logprobs"]);
    accepted += reply["usage"]["completion_tokens_details"]["accepted_prediction_tokens"]
                    .get<std::size_t>();
  }
  // The code rewrite repeats its prompt: n-gram drafts are accepted there.
  CHECK(accepted > 20);
  // Eight at once.
  std::vector<std::future<json>> running;
  for (auto const& r : reqs)
    running.push_back(std::async(std::launch::async, [&s, r] { return post_chat(s.port(), r); }));
  for (std::size_t i = 0; i < running.size(); ++i) {
    INFO("concurrent request " << i);
    CHECK(running[i].get()["tf"]["token_sha"] == plain[i]["tf"]["token_sha"]);
  }
  httplib::Client c("127.0.0.1", s.port());
  auto m = c.Get("/metrics");
  REQUIRE(m);
  auto const drafted = metric(m->body, "vllm:spec_decode_num_draft_tokens_total");
  auto const taken = metric(m->body, "vllm:spec_decode_num_accepted_tokens_total");
  CHECK(drafted >= taken);
  CHECK(taken >= accepted);
  CHECK(metric(m->body, "tf_draft_tokens_total") == drafted);
  CHECK(m->body.find("tf_draft_tokens_total{source=\"ngram\"}") != std::string::npos);
  CHECK(s.stop() == 0);
  check_census(s.log());
}

namespace {

json post_completion(int port, json const& body) {
  return post_json(port, "/v1/completions", body);
}

// Greedy and seeded completions of a few prompts, with and without drafts: equal token hashes;
// returns the accepted and rejected drafts of the drafted ones.
std::pair<std::size_t, std::size_t> check_fixture_drafts(int port) {
  std::size_t accepted = 0, rejected = 0;
  std::vector<json> bodies;
  for (std::string const p : {"state 1 kept; state 2 kept; state 3", "the cat sat on the mat"})
    for (int seeded = 0; seeded < 2; ++seeded) {
      json b{{"prompt", p}, {"max_tokens", 24}, {"temperature", seeded ? 0.8 : 0.0}};
      if (seeded) b["seed"] = 5;
      bodies.push_back(b);
    }
  for (auto const& b : bodies) {
    INFO(b.dump());
    auto off = b;
    off["draft"] = false;
    auto const plain = post_completion(port, off);
    auto const drafted = post_completion(port, b);
    CHECK(drafted["tf"]["token_sha"] == plain["tf"]["token_sha"]);
    auto const& d = drafted["usage"]["completion_tokens_details"];
    accepted += d["accepted_prediction_tokens"].get<std::size_t>();
    rejected += d["rejected_prediction_tokens"].get<std::size_t>();
  }
  return {accepted, rejected};
}

}  // namespace

TEST_CASE("tiny fixtures: a draft model's drafts give the replies without drafts") {
  REQUIRE(fs::exists(serve_binary()));
  fs::path const root = TF_FIXTURES_DIR;
  auto const target = (root / "qwen/tiny/tiny-q8_0.gguf").string();
  {
    // The target drafting for itself: every greedy draft is accepted.
    live_server s({target, "--parallel", "2", "--context", "256", "--threads", "2", "--draft",
                   "model", "--draft-model", target});
    REQUIRE(s.wait_ready(std::chrono::seconds(120)));
    CHECK(s.log().find("tf: speculative drafts: model") != std::string::npos);
    auto const [accepted, rejected] = check_fixture_drafts(s.port());
    CHECK(accepted > 20);
    CHECK(s.stop() == 0);
    check_census(s.log());
  }
  for (auto const& [t, d] :
       {std::pair{"qwen/tiny/tiny-q8_0.gguf", "qwen/tiny_moe/tiny-f32.gguf"},
        std::pair{"qwen/tiny35/tiny-f32.gguf", "glm/tiny4/tiny-q8_0.gguf"},
        std::pair{"qwen/tiny_moe/tiny-q8_0.gguf", "qwen/tiny35/tiny-f32.gguf"}}) {
    INFO("target " << t << ", draft model " << d);
    live_server s({(root / t).string(), "--parallel", "2", "--context", "256", "--threads", "2",
                   "--draft", "model", "--draft-model", (root / d).string()});
    REQUIRE(s.wait_ready(std::chrono::seconds(120)));
    CHECK(s.log().find("tf: speculative drafts: model") != std::string::npos);
    auto const [accepted, rejected] = check_fixture_drafts(s.port());
    CHECK(accepted + rejected > 0);
    CHECK(s.stop() == 0);
    check_census(s.log());
  }
  // A draft model file that does not load stops the start with its error.
  live_server bad({target, "--draft", "model", "--draft-model", "/nonexistent.gguf"});
  CHECK_FALSE(bad.wait_ready(std::chrono::seconds(60)));
  CHECK(bad.log().find("nonexistent.gguf") != std::string::npos);
}

TEST_CASE("tiny fixtures: Gemma 4's assistant drafts over the target's KV, replies unchanged") {
  REQUIRE(fs::exists(serve_binary()));
  fs::path const root = TF_FIXTURES_DIR;
  auto const assistant = (root / "gemma/tiny4_e/assistant-f32.gguf").string();
  {
    live_server s({(root / "gemma/tiny4_e/tiny-q8_0.gguf").string(), "--parallel", "2", "--context",
                   "256", "--threads", "2", "--draft", "model", "--draft-model", assistant});
    REQUIRE(s.wait_ready(std::chrono::seconds(120)));
    CHECK(s.log().find("tf: speculative drafts: gemma4-assistant") != std::string::npos);
    CHECK(s.log().find("over the target's KV") != std::string::npos);
    auto const [accepted, rejected] = check_fixture_drafts(s.port());
    CHECK(accepted + rejected > 0);
    httplib::Client c("127.0.0.1", s.port());
    auto const m = c.Get("/metrics");
    REQUIRE(m);
    CHECK(m->body.find("tf_draft_tokens_total{source=\"assistant\"}") != std::string::npos);
    CHECK(s.stop() == 0);
    check_census(s.log());
  }
  // An assistant beside a target of another family stops the start and says why.
  live_server bad({(root / "qwen/tiny/tiny-q8_0.gguf").string(), "--draft", "model",
                   "--draft-model", assistant});
  CHECK_FALSE(bad.wait_ready(std::chrono::seconds(60)));
  CHECK(bad.log().find("the qwen3 family runs none") != std::string::npos);
}

TEST_CASE("tiny fixtures: a model's own MTP head drafts, and the replies do not change") {
  REQUIRE(fs::exists(serve_binary()));
  fs::path const root = TF_FIXTURES_DIR;
  for (auto const* t : {"qwen/tiny35_mtp/tiny-f32.gguf", "glm/tiny45_mtp/tiny-f32.gguf"}) {
    INFO("target " << t);
    live_server s({(root / t).string(), "--parallel", "2", "--context", "256", "--threads", "2",
                   "--draft", "mtp"});
    REQUIRE(s.wait_ready(std::chrono::seconds(120)));
    CHECK(s.log().find("tf: speculative drafts: mtp") != std::string::npos);
    auto const [accepted, rejected] = check_fixture_drafts(s.port());
    CHECK(accepted + rejected > 0);
    CHECK(s.stop() == 0);
    check_census(s.log());
  }
  // A model without an MTP head stops the start and says so.
  live_server bad({(root / "qwen/tiny35/tiny-f32.gguf").string(), "--draft", "mtp"});
  CHECK_FALSE(bad.wait_ready(std::chrono::seconds(60)));
  CHECK(bad.log().find("carries no MTP head") != std::string::npos);
}
