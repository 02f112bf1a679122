#pragma once
// An in-process api_server over the toy model on a free loopback port, and what the HTTP tests
// ask it: request bodies, posts with a wanted status, OpenAI error checks, SSE payloads, and a
// probe model that records what the server handed the model.
#include <tf/serve/http_server.hpp>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/http_post.hpp"
#include "toy_model.hpp"

namespace tf::serve::test {

using nlohmann::json;
using namespace std::chrono_literals;

using toy_served = lane_served_model<toy_model, toy_family, toy_codec>;

struct live_server {
  explicit live_server(http_config hc = {}, host_config lc = {4, 512, 4, 64},
                       std::size_t pages = 128, std::chrono::microseconds delay = 300us) {
    hc.port = 0;
    server = std::make_unique<api_server>(hc);
    port = server->bind();
    thread = std::thread([this] { server->listen(); });
    if (pages > 0)
      server->set_model(std::make_shared<toy_served>(std::make_unique<toy_model>(pages, 16, delay),
                                                     toy_codec{}, lc));
  }
  ~live_server() {
    server->stop();
    thread.join();
    if (auto b = server->model()) b->shutdown(0ms);
  }
  httplib::Client client(std::string const& key = {}) const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    if (!key.empty()) c.set_bearer_token_auth(key.c_str());
    return c;
  }
  std::unique_ptr<api_server> server;
  int port = 0;
  std::thread thread;
};

inline json chat_body(std::string const& text, int max_tokens, bool stream = false) {
  return {{"model", "tf-toy"},
          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream}};
}

inline json post(httplib::Client& c, char const* path, json const& body, int want_status) {
  return tf::test::post_expecting(c, path, body, want_status);
}

inline void expect_error(httplib::Client& c, std::string const& body, int status,
                         std::string const& code) {
  auto r = c.Post("/v1/chat/completions", body, "application/json");
  REQUIRE(r);
  INFO(body << " -> " << r->body);
  CHECK(r->status == status);
  auto j = json::parse(r->body, nullptr, false);
  REQUIRE(j.is_object());
  REQUIRE(j.contains("error"));
  CHECK(j["error"]["message"].is_string());
  CHECK(j["error"].contains("type"));
  CHECK(j["error"].contains("param"));
  if (!code.empty()) CHECK(j["error"]["code"] == code);
}

/// A served model over another one: records the template kwargs encode_chat got and the
/// prompts the server submitted. Ids the toy model cannot read run as a BOS-only stand-in.
class probe_model final : public served_model {
 public:
  explicit probe_model(std::shared_ptr<served_model> inner) : inner_(std::move(inner)) {}

  std::vector<std::int32_t> encode_text(std::string const& text) const override {
    return inner_->encode_text(text);
  }
  std::vector<std::int32_t> encode_chat(json const& messages,
                                        json const& template_kwargs) const override {
    {
      std::lock_guard lock(mutex_);
      kwargs_.push_back(template_kwargs);
    }
    return inner_->encode_chat(messages, template_kwargs);
  }
  std::string piece(std::int32_t token) const override { return inner_->piece(token); }
  std::vector<std::int32_t> stop_tokens() const override { return inner_->stop_tokens(); }
  std::string model_id() const override { return inner_->model_id(); }
  stream_submit submit(generation_request req) override {
    {
      std::lock_guard lock(mutex_);
      prompts_.push_back(req.prompt);
    }
    if (std::ranges::any_of(req.prompt, [](std::int32_t t) {
          return t < 0 || static_cast<std::size_t>(t) >= toy_vocab::size;
        }))
      req.prompt = {toy_vocab::bos};
    return inner_->submit(std::move(req));
  }
  load_snapshot load() const override { return inner_->load(); }
  census count() const override { return inner_->count(); }
  metrics& stats() override { return inner_->stats(); }
  host_config const& config() const override { return inner_->config(); }
  census shutdown(std::chrono::milliseconds grace) override { return inner_->shutdown(grace); }

  std::vector<json> kwargs() const {
    std::lock_guard lock(mutex_);
    return kwargs_;
  }
  std::vector<std::vector<std::int32_t>> prompts() const {
    std::lock_guard lock(mutex_);
    return prompts_;
  }

 private:
  std::shared_ptr<served_model> inner_;
  mutable std::mutex mutex_;
  mutable std::vector<json> kwargs_;
  std::vector<std::vector<std::int32_t>> prompts_;
};

inline std::string read_text(std::string const& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses an SSE body into its data payloads.
inline std::vector<std::string> sse_events(std::string const& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    auto end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

}  // namespace tf::serve::test
