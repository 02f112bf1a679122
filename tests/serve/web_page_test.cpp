// The chat page's routes in process: the embedded files at `/` and their paths without a key,
// and /props (the mode that suits the model, the start's budget lines) behind the key.
#include <tf/serve/web_page.hpp>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "http_test_server.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using nlohmann::json;

namespace {

constexpr web_asset assets[] = {
    {"/index.html", "text/html; charset=utf-8", "<!doctype html><p>page</p>"},
    {"/app.js", "text/javascript; charset=utf-8", "main();"},
};

// A live server over the toy model whose codec has `tmpl` as its chat template.
std::unique_ptr<test::live_server> page_server(std::string tmpl, start_info info,
                                               std::string key = {}) {
  http_config hc;
  hc.api_key = std::move(key);
  auto s = std::make_unique<test::live_server>(hc, host_config{4, 512, 4, 64}, 0);
  install_web_page(s->server->http(), assets);
  s->server->set_start_info(std::move(info));
  toy_codec codec;
  codec.template_src = std::move(tmpl);
  s->server->set_model(std::make_shared<test::toy_served>(std::make_unique<toy_model>(128, 16),
                                                          codec, host_config{4, 512, 4, 64}));
  return s;
}

}  // namespace

TEST_CASE("the page's files are served at / and their paths, with no API key") {
  auto s = page_server("", {}, "sekrit");
  auto c = s->client();
  auto r = c.Get("/");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "<!doctype html><p>page</p>");
  CHECK(r->get_header_value("Content-Type") == "text/html; charset=utf-8");
  CHECK(r->get_header_value("Content-Security-Policy").find("default-src 'self'") !=
        std::string::npos);
  r = c.Get("/app.js");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "main();");
  CHECK(r->get_header_value("Content-Type") == "text/javascript; charset=utf-8");
  // A route's '.' matches only a dot.
  r = c.Get("/appxjs");
  REQUIRE(r);
  CHECK(r->status == 404);
  // /props needs the key; with it, it answers.
  CHECK(c.Get("/props")->status == 401);
  auto keyed = s->client("sekrit");
  CHECK(keyed.Get("/props")->status == 200);
}

TEST_CASE("/props opens the page in chat mode only for a model with its own template") {
  start_info info;
  info.lines = {"CPU (toy): model 0.00 GiB; 4 streams at once"};
  SECTION("its own template: chat") {
    info.own_chat_template = true;
    auto s = page_server("{{ messages[0].content }}", info);
    auto c = s->client();
    auto r = c.Get("/props");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    auto const j = json::parse(r->body);
    CHECK(j["page_mode"] == "chat");
    CHECK(j["chat"] == true);
    CHECK(j["model"] == "tf-toy");
    CHECK(j["total_slots"] == 4);
    CHECK(j["n_ctx"] == 512);
    CHECK(j["chat_template"] == "{{ messages[0].content }}");
    CHECK(j["start_lines"] == json::array({"CPU (toy): model 0.00 GiB; 4 streams at once"}));
    CHECK(j["sampling_defaults"].contains("temperature"));
  }
  SECTION("a built-in fallback template (a base model): completion, chat still offered") {
    info.own_chat_template = false;
    auto s = page_server("{{ messages[0].content }}", info);
    auto const j = json::parse(s->client().Get("/props")->body);
    CHECK(j["page_mode"] == "completion");
    CHECK(j["chat"] == true);
  }
  SECTION("no template at all: completion only") {
    info.own_chat_template = true;
    auto s = page_server("", info);
    auto const j = json::parse(s->client().Get("/props")->body);
    CHECK(j["page_mode"] == "completion");
    CHECK(j["chat"] == false);
  }
}

TEST_CASE("/props answers 503 model_loading before the model is in") {
  test::live_server s({}, {}, 0);
  auto r = s.client().Get("/props");
  REQUIRE(r);
  CHECK(r->status == 503);
  CHECK(json::parse(r->body)["error"]["code"] == "model_loading");
}
