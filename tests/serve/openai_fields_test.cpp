// OpenAI fields over the server (toy model): logit_bias, echo, a drawn seed, n > 1, the server's
// sampling defaults, fields refused by name or ignored, and a non-streamed reply whose status is
// its outcome.
#include <tf/serve/http_server.hpp>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <future>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "http_test_server.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using namespace tf::serve::test;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

json completion(std::string const& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

std::string text_of(json const& reply, std::size_t i = 0) {
  return reply["choices"][i]["text"].get<std::string>();
}

void expect_refused(httplib::Client& c, char const* path, json const& body,
                    std::string const& param, std::string const& code) {
  auto r = c.Post(path, body.dump(), "application/json");
  REQUIRE(r);
  INFO(body.dump() << " -> " << r->body);
  CHECK(r->status == 400);
  auto j = json::parse(r->body, nullptr, false);
  REQUIRE(j.is_object());
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["param"] == param);
  CHECK(j["error"]["code"] == code);
  CHECK(j["error"]["message"].get<std::string>().find(param) != std::string::npos);
}

// Every streamed choice's text, by index, from an SSE body.
std::map<int, std::string> streamed_texts(std::string const& body, bool chat) {
  std::map<int, std::string> out;
  for (auto const& e : sse_events(body)) {
    if (e == "[DONE]") continue;
    auto j = json::parse(e);
    for (auto const& ch : j["choices"]) {
      auto const i = ch["index"].get<int>();
      if (chat && ch["delta"].contains("content"))
        out[i] += ch["delta"]["content"].get<std::string>();
      if (!chat && ch.contains("text")) out[i] += ch["text"].get<std::string>();
    }
  }
  return out;
}

/// A served model whose every stream yields one token and then fails, as a forward error would.
class failing_model final : public served_model {
 public:
  explicit failing_model(std::shared_ptr<served_model> inner) : inner_(std::move(inner)) {}
  std::vector<std::int32_t> encode_text(std::string const& t) const override {
    return inner_->encode_text(t);
  }
  std::vector<std::int32_t> encode_chat(json const& m, json const& kw) const override {
    return inner_->encode_chat(m, kw);
  }
  std::string piece(std::int32_t t) const override { return inner_->piece(t); }
  std::vector<std::int32_t> stop_tokens() const override { return inner_->stop_tokens(); }
  std::string model_id() const override { return inner_->model_id(); }
  stream_submit submit(generation_request) override {
    stream_submit out;
    out.status = submit_status::admitted;
    out.stream = std::make_shared<request_stream>();
    auto s = out.stream;
    std::thread([s] {
      std::this_thread::sleep_for(30ms);
      s->push({'a', 0.0f, {}});
      s->finish(finish_reason::error, "tf: forward failed: the device is gone");
    }).detach();
    return out;
  }
  load_snapshot load() const override { return inner_->load(); }
  census count() const override { return inner_->count(); }
  metrics& stats() override { return inner_->stats(); }
  host_config const& config() const override { return inner_->config(); }
  census shutdown(std::chrono::milliseconds g) override { return inner_->shutdown(g); }

 private:
  std::shared_ptr<served_model> inner_;
};

}  // namespace

TEST_CASE("logit_bias: +100 forces a token, -100 bans it, per stream; bad ones get a 400") {
  live_server s({}, {4, 512, 8, 64}, 256, 1ms);
  auto c = s.client();
  auto const plain = post(c, "/v1/completions", completion("abc", 12), 200);
  auto const text = text_of(plain);
  REQUIRE(text.size() == 12);

  auto forced = completion("abc", 12);
  forced["logit_bias"] = {{"120", 100}};  // 'x'
  CHECK(text_of(post(c, "/v1/completions", forced, 200)) == std::string(12, 'x'));
  // Sampled, too: the bias comes before temperature and the cuts.
  forced["temperature"] = 1.0;
  forced["seed"] = 3;
  CHECK(text_of(post(c, "/v1/completions", forced, 200)) == std::string(12, 'x'));

  auto banned = completion("abc", 12);
  banned["logit_bias"] = {{std::to_string(static_cast<unsigned char>(text[0])), -100}};
  auto const other = text_of(post(c, "/v1/completions", banned, 200));
  CHECK(other[0] != text[0]);

  // Batch invariance: biased and plain requests run together; the plain ones equal solo.
  std::vector<std::future<json>> rs;
  for (int i = 0; i < 6; ++i)
    rs.push_back(std::async(std::launch::async, [&, i] {
      auto cl = s.client();
      auto body = completion("abc", 12);
      if (i % 2) body["logit_bias"] = {{"120", 100}};
      return post(cl, "/v1/completions", body, 200);
    }));
  for (int i = 0; i < 6; ++i) {
    auto const r = rs[static_cast<std::size_t>(i)].get();
    if (i % 2)
      CHECK(text_of(r) == std::string(12, 'x'));
    else
      CHECK(r["tf"]["token_sha"] == plain["tf"]["token_sha"]);
  }

  for (auto const& bad : {json{{"abc", 1}}, json{{"-1", 1}}, json{{"5", 101}}, json{{"5", -101.5}}})
    expect_refused(
        c, "/v1/completions",
        [&] {
          auto b = completion("abc", 2);
          b["logit_bias"] = bad;
          return b;
        }(),
        "logit_bias", "invalid_value");
  auto outside = completion("abc", 2);
  outside["logit_bias"] = {{"258", 1}};  // the toy vocabulary is 258 tokens
  expect_refused(c, "/v1/completions", outside, "logit_bias", "invalid_value");
  auto typed = completion("abc", 2);
  typed["logit_bias"] = json::array({1, 2});
  expect_refused(c, "/v1/completions", typed, "logit_bias", "invalid_type");
  typed["logit_bias"] = {{"5", "high"}};
  expect_refused(c, "/v1/completions", typed, "logit_bias", "invalid_type");
  post(c, "/v1/completions", completion("abc", 2), 200);  // still serving
}

TEST_CASE("echo puts the prompt before the completion, whole and streamed") {
  live_server s;
  auto c = s.client();
  auto const plain = text_of(post(c, "/v1/completions", completion("hello there", 10), 200));
  auto body = completion("hello there", 10);
  body["echo"] = true;
  auto const echoed = post(c, "/v1/completions", body, 200);
  CHECK(text_of(echoed) == "hello there" + plain);
  CHECK(echoed["usage"]["completion_tokens"] == 10);
  body["stream"] = true;
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(streamed_texts(r->body, false)[0] == "hello there" + plain);

  auto chat = chat_body("hi", 4);
  chat["echo"] = true;
  expect_refused(c, "/v1/chat/completions", chat, "echo", "unsupported_parameter");
  body["stream"] = false;
  body["max_tokens"] = 0;
  body["echo"] = false;
  expect_refused(c, "/v1/completions", body, "max_tokens", "invalid_value");
}

TEST_CASE("an omitted seed is drawn and returned in tf.seed; sending it back repeats the text") {
  live_server s;
  auto c = s.client();
  json body = {{"prompt", "once upon"}, {"max_tokens", 24}, {"temperature", 1.0}};
  auto const a = post(c, "/v1/completions", body, 200);
  auto const b = post(c, "/v1/completions", body, 200);
  REQUIRE(a["tf"]["seed"].is_number_integer());
  REQUIRE(b["tf"]["seed"].is_number_integer());
  CHECK(a["tf"]["seed"] != b["tf"]["seed"]);
  CHECK(a["tf"]["token_sha"] != b["tf"]["token_sha"]);  // 24 sampled tokens differ somewhere
  body["seed"] = a["tf"]["seed"];
  auto const again = post(c, "/v1/completions", body, 200);
  CHECK(again["tf"]["token_sha"] == a["tf"]["token_sha"]);
  CHECK(text_of(again) == text_of(a));
  CHECK(again["tf"]["seed"] == a["tf"]["seed"]);
  body["seed"] = -7;  // any 64-bit integer
  CHECK(post(c, "/v1/completions", body, 200)["tf"]["seed"] == -7);
  // A streamed reply carries it too.
  body.erase("seed");
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto r = c.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(r);
  auto const events = sse_events(r->body);
  REQUIRE(events.size() >= 2);
  auto const usage = json::parse(events[events.size() - 2]);
  CHECK(usage["tf"]["seed"].is_number_integer());
}

TEST_CASE("n > 1: n choices, each repeatable by its seed; n over --parallel is refused") {
  live_server s({}, {4, 512, 8, 64});
  auto c = s.client();
  json body = {
      {"prompt", "the sea"}, {"max_tokens", 16}, {"temperature", 1.0}, {"seed", 77}, {"n", 3}};
  auto const many = post(c, "/v1/completions", body, 200);
  REQUIRE(many["choices"].size() == 3);
  std::size_t tokens = 0;
  std::set<std::string> distinct;
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("choice " << i);
    CHECK(many["choices"][i]["index"] == i);
    auto const& block = many["tf"]["choices"][i];
    CHECK(block["seed"] == 77 + static_cast<int>(i));
    tokens += block["tokens"].get<std::size_t>();
    distinct.insert(text_of(many, i));
    json one = body;
    one["n"] = 1;
    one["seed"] = 77 + static_cast<int>(i);
    auto const solo = post(c, "/v1/completions", one, 200);
    CHECK(text_of(solo) == text_of(many, i));
    CHECK(solo["tf"]["token_sha"] == block["token_sha"]);
  }
  CHECK(distinct.size() == 3);
  CHECK(many["usage"]["completion_tokens"] == tokens);
  CHECK(many["usage"]["prompt_tokens"] == 8);  // BOS + 7 bytes, counted once

  // Streamed, chat: every index gets its role, its text and its own finish.
  json chat = chat_body("sing", 10, true);
  chat["n"] = 2;
  chat["temperature"] = 1.0;
  chat["seed"] = 5;
  auto r = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  auto const streamed = streamed_texts(r->body, true);
  int finishes = 0;
  for (auto const& e : sse_events(r->body)) {
    if (e == "[DONE]") continue;
    auto const j = json::parse(e);
    for (auto const& ch : j["choices"]) finishes += !ch["finish_reason"].is_null();
  }
  CHECK(finishes == 2);
  chat["stream"] = false;
  auto const whole = post(c, "/v1/chat/completions", chat, 200);
  REQUIRE(whole["choices"].size() == 2);
  REQUIRE(streamed.size() == 2);
  for (int i = 0; i < 2; ++i)
    CHECK(streamed.at(i) == whole["choices"][i]["message"]["content"].get<std::string>());

  body["n"] = 5;
  auto const refused = c.Post("/v1/completions", body.dump(), "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 400);
  auto const e = json::parse(refused->body)["error"];
  CHECK(e["param"] == "n");
  CHECK(e["message"].get<std::string>().find("at most 4") != std::string::npos);
  body["n"] = 0;
  CHECK(c.Post("/v1/completions", body.dump(), "application/json")->status == 400);
}

TEST_CASE("OpenAI fields tf cannot honour are refused by name; fields nobody defines are ignored") {
  live_server s;
  auto c = s.client();
  json const tool = {{"type", "function"},
                     {"function", {{"name", "f"}, {"parameters", json::object()}}}};
  std::vector<std::pair<std::string, json>> const refused_chat = {
      {"functions", json::array({tool["function"]})},
      {"function_call", {{"name", "f"}}},
      {"modalities", json::array({"text", "audio"})},
      {"audio", {{"voice", "alloy"}, {"format", "wav"}}},
      {"prediction", {{"type", "content"}, {"content", "x"}}},
      {"web_search_options", json::object()},
  };
  for (auto const& [key, value] : refused_chat) {
    auto body = chat_body("hi", 2);
    body[key] = value;
    expect_refused(c, "/v1/chat/completions", body, key, "unsupported_parameter");
  }
  // A forced tool call without tools is the request's mistake; with tools, this toy model's
  // plain rendering teaches no call format, so the generic fallback forces a JSON call.
  for (auto const& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "f"}}}}}) {
    auto body = chat_body("hi", 2);
    body["tool_choice"] = choice;
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(json::parse(r->body)["error"]["param"] == "tool_choice");
    body["tools"] = json::array({tool});
    auto const cut = post(c, "/v1/chat/completions", body, 200)["choices"][0];  // 2 tokens
    CHECK(cut["finish_reason"] == "length");
    CHECK(cut["message"]["content"] == "{\"");
  }
  auto comp = completion("abc", 2);
  comp["suffix"] = "the end";
  expect_refused(c, "/v1/completions", comp, "suffix", "unsupported_parameter");
  comp.erase("suffix");
  comp["best_of"] = 3;
  expect_refused(c, "/v1/completions", comp, "best_of", "unsupported_parameter");
  comp["best_of"] = 1;
  post(c, "/v1/completions", comp, 200);

  // Harmless settings and fields no API defines: a 200, as vLLM and llama-server answer.
  auto ok = chat_body("hi", 2);
  ok["tools"] = json::array();
  ok["tool_choice"] = "none";
  ok["parallel_tool_calls"] = true;
  ok["response_format"] = {{"type", "text"}};
  ok["modalities"] = json::array({"text"});
  ok["user"] = "someone";
  ok["store"] = false;
  ok["metadata"] = {{"k", "v"}};
  ok["service_tier"] = "auto";
  ok["no_api_defines_this"] = {{"at", "all"}};
  ok["reasoning_effort"] = "low";
  auto const reply = post(c, "/v1/chat/completions", ok, 200);
  CHECK(reply["choices"][0]["message"]["content"].is_string());
  auto m = c.Get("/metrics");
  REQUIRE(m);
  // Every refused field above, plus suffix, best_of and the two tool_choice refusals (no
  // tools), counted as a bad request.
  auto const rejected = "tf_requests_rejected_total{reason=\"bad_request\"} " +
                        std::to_string(refused_chat.size() + 2 + 2) + "\n";
  CHECK(m->body.find(rejected) != std::string::npos);
}

TEST_CASE("sampling defaults: omitted fields take the server's; a request's own fields win") {
  SECTION("parsing") {
    tf::sample::sampling_defaults d;  // llama-server's
    auto r = parse_openai_request(R"({"prompt": "x"})", false, d);
    CHECK(r.sampling.temperature == 0.8f);
    CHECK(r.sampling.top_k == 40);
    CHECK(r.sampling.top_p == 0.95f);
    CHECK(r.sampling.min_p == 0.05f);
    CHECK_FALSE(r.seed.has_value());
    r = parse_openai_request(
        R"({"prompt": "x", "temperature": 0, "top_k": -1, "top_p": 1, "min_p": 0, "seed": 9})",
        false, d);
    CHECK(r.sampling.temperature == 0.0f);  // greedy stays greedy
    CHECK(r.sampling.top_k == 0);
    CHECK(r.sampling.top_p == 1.0f);
    CHECK(r.sampling.min_p == 0.0f);
    CHECK(r.seed == 9);
    d.temperature = {0.6f, "general.sampling.temp"};
    d.top_k = {20, "--top-k"};
    r = parse_openai_request(R"({"prompt": "x", "top_p": 0.5})", false, d);
    CHECK(r.sampling.temperature == 0.6f);
    CHECK(r.sampling.top_k == 20);
    CHECK(r.sampling.top_p == 0.5f);
    CHECK(d.line().find("temperature 0.6 (general.sampling.temp), top_k 20 (--top-k)") == 0);
  }
  SECTION("over HTTP: top-k 1 by default makes a request without fields greedy") {
    http_config hc;
    hc.sampling.temperature = {1.0f, "--temp"};
    hc.sampling.top_k = {1, "--top-k"};
    live_server s(hc);
    auto c = s.client();
    auto const greedy = post(c, "/v1/completions", completion("zebra", 16), 200);
    json bare = {{"prompt", "zebra"}, {"max_tokens", 16}};
    CHECK(post(c, "/v1/completions", bare, 200)["tf"]["token_sha"] == greedy["tf"]["token_sha"]);
    bare["top_k"] = 0;  // the request's own field wins: sampled at temperature 1 over all
    bare["seed"] = 1;
    CHECK(post(c, "/v1/completions", bare, 200)["tf"]["token_sha"] != greedy["tf"]["token_sha"]);
    auto const models = json::parse(c.Get("/v1/models")->body);
    auto const& d = models["data"][0]["sampling_defaults"];
    CHECK(d["temperature"] == json{{"value", 1.0}, {"source", "--temp"}});
    CHECK(d["top_k"] == json{{"value", 1}, {"source", "--top-k"}});
    CHECK(d["min_p"]["source"] == "llama-server");
  }
}

TEST_CASE("a non-streamed reply's status is its outcome, sent with the whole reply") {
  live_server s;
  auto c = s.client();
  auto r = c.Post("/v1/completions", completion("abc", 20).dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  REQUIRE(!r->body.empty());
  CHECK(r->body.front() == '{');  // no whitespace written while it ran
  CHECK(r->get_header_value("Transfer-Encoding").empty());
  CHECK(r->get_header_value("Content-Length") == std::to_string(r->body.size()));

  // Generation that fails after a token: a 500 with the error, not a 200.
  auto toy = s.server->model();
  s.server->set_model(std::make_shared<failing_model>(toy));
  auto failed = c.Post("/v1/chat/completions", chat_body("hi", 8).dump(), "application/json");
  REQUIRE(failed);
  CHECK(failed->status == 500);
  auto const e = json::parse(failed->body);
  CHECK(e["error"]["type"] == "server_error");
  CHECK(e["error"]["message"].get<std::string>().find("the device is gone") != std::string::npos);
  s.server->set_model(toy);
  CHECK(c.Post("/v1/completions", completion("abc", 4).dump(), "application/json")->status == 200);
}
