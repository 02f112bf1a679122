// The HTTP server's mechanics over the toy model: health, whole and streamed replies, bad input,
// auth, the queue and connection caps, concurrency, and hang-ups.
#include <tf/serve/http_server.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <future>
#include <thread>

#include "http_test_server.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using namespace tf::serve::test;
using nlohmann::json;
using namespace std::chrono_literals;

TEST_CASE("health answers 503 while loading, then 200") {
  live_server s({}, {}, 0);
  auto c = s.client();
  auto r = c.Get("/health");
  REQUIRE(r);
  CHECK(r->status == 503);
  CHECK(c.Get("/v1/models")->status == 503);
  s.server->set_model(std::make_shared<toy_served>(std::make_unique<toy_model>(64, 16), toy_codec{},
                                                   host_config{}));
  CHECK(c.Get("/health")->status == 200);
  auto m = json::parse(c.Get("/v1/models")->body);
  CHECK(m["data"][0]["id"] == "tf-toy");
}

TEST_CASE("chat and text completions, whole and streamed, agree") {
  live_server s;
  auto c = s.client();
  auto whole = post(c, "/v1/chat/completions", chat_body("hello there", 24), 200);
  CHECK(whole["object"] == "chat.completion");
  auto text = whole["choices"][0]["message"]["content"].get<std::string>();
  auto sha = whole["tf"]["token_sha"].get<std::string>();
  CHECK(sha.size() == 64);
  CHECK(whole["usage"]["completion_tokens"].get<int>() <= 24);
  CHECK(whole["usage"]["total_tokens"] == whole["usage"]["prompt_tokens"].get<int>() +
                                              whole["usage"]["completion_tokens"].get<int>());

  auto body = chat_body("hello there", 24, true);
  body["stream_options"] = {{"include_usage", true}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->get_header_value("Content-Type").find("text/event-stream") == 0);
  auto events = sse_events(r->body);
  REQUIRE(events.size() >= 3);
  CHECK(events.back() == "[DONE]");
  std::string streamed;
  std::string stream_sha;
  bool saw_usage = false;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    auto e = json::parse(events[i]);
    CHECK(e["object"] == "chat.completion.chunk");
    if (e.contains("tf")) stream_sha = e["tf"]["token_sha"];
    if (e.contains("usage")) saw_usage = true;
    for (auto const& ch : e["choices"])
      if (ch["delta"].contains("content")) streamed += ch["delta"]["content"].get<std::string>();
  }
  CHECK(saw_usage);
  CHECK(streamed == text);
  CHECK(stream_sha == sha);

  auto comp =
      post(c, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 10}, {"temperature", 0}}, 200);
  CHECK(comp["object"] == "text_completion");
  CHECK(comp["choices"][0]["text"].is_string());
  CHECK(comp["usage"]["prompt_tokens"] == 4);  // BOS + 3 bytes
}

TEST_CASE("stop strings cut the text; logprobs come back") {
  live_server s;
  auto c = s.client();
  auto full =
      post(c, "/v1/completions", {{"prompt", "xyz"}, {"max_tokens", 40}, {"temperature", 0}}, 200);
  auto text = full["choices"][0]["text"].get<std::string>();
  REQUIRE(text.size() >= 6);
  auto stop = text.substr(3, 2);
  auto cut =
      post(c, "/v1/completions",
           {{"prompt", "xyz"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", {stop}}}, 200);
  auto got = cut["choices"][0]["text"].get<std::string>();
  CHECK(got == text.substr(0, text.find(stop)));
  CHECK(cut["choices"][0]["finish_reason"] == "stop");

  auto body = chat_body("hi", 5);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  auto lp = post(c, "/v1/chat/completions", body, 200);
  auto const& content = lp["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == lp["usage"]["completion_tokens"].get<std::size_t>());
  for (auto const& e : content) {
    CHECK(e["logprob"].get<double>() <= 0.0);
    CHECK(e["top_logprobs"].size() == 3);
    CHECK(e["top_logprobs"][0]["logprob"].get<double>() >= e["logprob"].get<double>() - 1e-6);
  }
  // logprobs alone: the token's own logprob, a number (NaN would come back as null).
  body.erase("top_logprobs");
  auto alone = post(c, "/v1/chat/completions", body, 200);
  auto const& entries = alone["choices"][0]["logprobs"]["content"];
  REQUIRE(!entries.empty());
  for (auto const& e : entries) {
    REQUIRE(e["logprob"].is_number());
    CHECK(e["logprob"].get<double>() <= 0.0);
    CHECK(e["top_logprobs"].empty());
  }
}

TEST_CASE("bad input gets its 4xx and an OpenAI error object; the server keeps serving") {
  http_config hc;
  hc.max_body_bytes = 4096;
  hc.read_timeout_s = 1;
  live_server s(hc, {2, 128, 4, 64}, 64);
  auto c = s.client();
  expect_error(c, "{not json", 400, "invalid_json");
  expect_error(c, "[1,2]", 400, "invalid_json");
  expect_error(c, R"({"messages": "hi"})", 400, "invalid_type");
  expect_error(c, R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "invalid_value");
  expect_error(c, R"({"messages": [{"role": "user", "content": 5}]})", 400, "invalid_type");
  expect_error(c, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3})", 400,
               "invalid_value");
  expect_error(c, R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "7"})", 400,
               "invalid_type");
  expect_error(c, R"({"messages": [{"role": "user", "content": "x"}], "temperature": 9})", 400,
               "invalid_value");
  expect_error(c, R"({"messages": [{"role": "user", "content": "x"}], "n": 3})", 400,
               "invalid_value");
  expect_error(c, R"({"messages": []})", 400, "invalid_type");
  expect_error(c, R"({})", 400, "missing_required_parameter");
  expect_error(c, chat_body(std::string(200, 'q'), 4).dump(), 400, "context_length_exceeded");
  expect_error(c,
               json{{"messages", {{{"role", "user"}, {"content", std::string(5000, 'q')}}}}}.dump(),
               413, "request_too_large");

  // Half-open: a client that sends half its headers and stalls is dropped after the timeout.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(s.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  std::string half = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n";
  REQUIRE(::send(fd, half.data(), half.size(), 0) == static_cast<ssize_t>(half.size()));
  auto ok = post(c, "/v1/chat/completions", chat_body("still here", 4), 200);
  CHECK(ok["choices"][0]["message"]["content"].is_string());
  char buf[64];
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // The server answers a 4xx after its read timeout or closes, instead of waiting for ever.
  auto n = ::recv(fd, buf, sizeof buf, 0);
  if (n > 0)
    CHECK(std::string(buf, 10) == "HTTP/1.1 4");
  else
    CHECK(n == 0);
  ::close(fd);
  CHECK(c.Get("/health")->status == 200);
}

TEST_CASE("API key: every /v1 route needs it; /health does not") {
  http_config hc;
  hc.api_key = "sekrit";
  live_server s(hc);
  auto none = s.client();
  auto wrong = s.client("sekriT");
  auto right = s.client("sekrit");
  CHECK(none.Get("/health")->status == 200);
  for (auto* c : {&none, &wrong}) {
    auto r = c->Get("/v1/models");
    REQUIRE(r);
    CHECK(r->status == 401);
    CHECK(json::parse(r->body)["error"]["code"] == "invalid_api_key");
    CHECK(c->Post("/v1/chat/completions", chat_body("x", 2).dump(), "application/json")->status ==
          401);
    // A body sent to no route is still turned away for the key, not answered 404.
    CHECK(c->Post("/v1/no_such_route", chat_body("x", 2).dump(), "application/json")->status ==
          401);
  }
  CHECK(right.Post("/v1/no_such_route", chat_body("x", 2).dump(), "application/json")->status ==
        404);
  CHECK(right.Get("/v1/models")->status == 200);
  post(right, "/v1/chat/completions", chat_body("x", 2), 200);
  CHECK(constant_time_equal("abc", "abc"));
  CHECK(!constant_time_equal("abc", "abd"));
  CHECK(!constant_time_equal("abc", "abcd"));
}

TEST_CASE("queue full answers 503 with Retry-After") {
  live_server s({}, {1, 512, 1, 64}, 128, 3ms);
  std::vector<std::future<httplib::Result>> rs;
  for (int i = 0; i < 6; ++i)
    rs.push_back(std::async(std::launch::async, [&] {
      auto c = s.client();
      return c.Post("/v1/chat/completions", chat_body("wait", 30).dump(), "application/json");
    }));
  int full = 0, ok = 0;
  for (auto& f : rs) {
    auto r = f.get();
    REQUIRE(r);
    if (r->status == 503) {
      ++full;
      CHECK(r->get_header_value("Retry-After") == "1");
      CHECK(json::parse(r->body)["error"]["code"] == "queue_full");
    }
    ok += r->status == 200;
  }
  CHECK(full >= 1);
  CHECK(ok >= 1);
  CHECK(ok + full == 6);
  auto m = s.client().Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find("tf_requests_rejected_total{reason=\"queue_full\"} ") != std::string::npos);
  CHECK(m->body.find("tf_time_to_first_token_seconds_count") != std::string::npos);
}

// A TCP connection that sends nothing: it holds one of the server's connection slots.
struct idle_connection {
  explicit idle_connection(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~idle_connection() { ::close(fd); }
  int fd = -1;
  bool connected = false;
};

TEST_CASE("over the connection cap: 503 with Retry-After, and served again once one closes") {
  http_config hc;
  hc.max_connections = 2;
  live_server s(hc);
  int ok_before = 0;
  {
    idle_connection a(s.port), b(s.port);
    REQUIRE(a.connected);
    REQUIRE(b.connected);
    std::this_thread::sleep_for(100ms);  // both are taken by serving workers
    auto c = s.client();
    auto r = c.Get("/v1/models");
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(r->get_header_value("Retry-After") == "1");
    auto j = json::parse(r->body, nullptr, false);
    REQUIRE(j.is_object());
    CHECK(j["error"]["code"] == "too_many_connections");
    ok_before = r->status == 200;
  }
  CHECK(ok_before == 0);
  // The idle connections are closed: the cap frees and requests are served again.
  // A worker may still hold a closed socket for a moment, so a retry can be refused too.
  int status = 0, refused = 1;
  for (int i = 0; i < 100 && status != 200; ++i) {
    auto c = s.client();
    auto r = c.Get("/v1/models");
    status = r ? r->status : -1;
    refused += status == 503;
    if (status != 200) std::this_thread::sleep_for(50ms);
  }
  CHECK(status == 200);
  auto m = s.client().Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find(fmt::format(
            "tf_requests_rejected_total{{reason=\"too_many_connections\"}} {}\n", refused)) !=
        std::string::npos);
}

TEST_CASE("over HTTP: 8 concurrent greedy replies equal solo; load stays within --parallel") {
  live_server s({}, {4, 1024, 16, 64}, 256, 500us);
  std::vector<std::string> prompts;
  for (int i = 0; i < 8; ++i)
    prompts.push_back(std::string(static_cast<std::size_t>(3 + 29 * i), 'k' + i));
  std::vector<std::string> solo;
  for (auto const& p : prompts) {
    auto c = s.client();
    solo.push_back(post(c, "/v1/chat/completions", chat_body(p, 40), 200)["tf"]["token_sha"]);
  }
  std::atomic<bool> polling{true};
  std::size_t max_running = 0, max_queued = 0;
  std::thread poller([&] {
    auto c = s.client();
    while (polling) {
      if (auto r = c.Get("/v1/load"); r && r->status == 200) {
        auto j = json::parse(r->body);
        max_running = std::max(max_running, j["running"].get<std::size_t>());
        max_queued = std::max(max_queued, j["queued"].get<std::size_t>());
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  std::vector<std::future<std::string>> rs;
  for (auto const& p : prompts)
    rs.push_back(std::async(std::launch::async, [&, p] {
      auto c = s.client();
      auto r = c.Post("/v1/chat/completions", chat_body(p, 40).dump(), "application/json");
      return r && r->status == 200 ? json::parse(r->body)["tf"]["token_sha"].get<std::string>()
                                   : std::string("failed");
    }));
  for (std::size_t i = 0; i < rs.size(); ++i) CHECK(rs[i].get() == solo[i]);
  polling = false;
  poller.join();
  CHECK(max_running <= 4);
  CHECK(max_running >= 1);
  // A reply can reach the client a round before the lane retires its stream.
  auto load = json::parse(s.client().Get("/v1/load")->body);
  for (int i = 0; i < 100 && load["running"] != 0; ++i) {
    std::this_thread::sleep_for(20ms);
    load = json::parse(s.client().Get("/v1/load")->body);
  }
  CHECK(load["max_running_seen"].get<int>() <= 4);
  CHECK(load["pages"]["held"] == 0);
  CHECK(load["lanes"]["total"] == 4);
  CHECK(load["lanes"]["free"] == 4);
  CHECK(load["state_slots"]["total"] == 0);  // the toy's paged pool has no recurrent state
  CHECK_FALSE(load.contains("slots"));
  CHECK(s.server->model()->count().balanced());
}

TEST_CASE("a client that disconnects mid-stream is cancelled and its pages freed") {
  live_server s({}, {2, 512, 4, 64}, 64, 2ms);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(s.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  auto body = chat_body("long one", 400, false).dump();
  auto req = fmt::format(
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: {}\r\n\r\n{}",
      body.size(), body);
  REQUIRE(::send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size()));
  auto c = s.client();
  bool saw_running = false;
  for (int i = 0; i < 200 && !saw_running; ++i) {
    saw_running = json::parse(c.Get("/v1/load")->body)["running"] == 1;
    std::this_thread::sleep_for(2ms);
  }
  CHECK(saw_running);
  ::close(fd);
  bool freed = false;
  for (int i = 0; i < 300 && !freed; ++i) {
    auto j = json::parse(c.Get("/v1/load")->body);
    freed = j["running"] == 0 && j["pages"]["held"] == 0;
    std::this_thread::sleep_for(10ms);
  }
  CHECK(freed);
  auto gen = s.server->model()->stats().generation_tokens.load();
  CHECK(gen < 400);  // it stopped early, not at max_tokens
  CHECK(s.server->model()->count().balanced());
}
