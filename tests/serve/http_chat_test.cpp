// Chat rendering over the server: chat_template_kwargs reach the template, Qwen3's enable_thinking,
// and a hybrid model's lanes, slots and prompt reuse over HTTP.
#include <tf/model/gguf.hpp>
#include <tf/serve/http_server.hpp>
#include <tf/tokenizer/from_gguf.hpp>
#include <tf/tokenizer/text_codec.hpp>

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
#include "hybrid_toy.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using namespace tf::serve::test;
using nlohmann::json;
using namespace std::chrono_literals;

TEST_CASE("chat_template_kwargs reach the chat template as they came; a non-object gets 400") {
  live_server s({}, {}, 0);
  auto toy = std::make_shared<toy_served>(std::make_unique<toy_model>(128, 16), toy_codec{},
                                          host_config{2, 512, 4, 64});
  auto probe = std::make_shared<probe_model>(toy);
  s.server->set_model(probe);
  auto c = s.client();

  json const kwargs = {{"enable_thinking", false},
                       {"persona", "terse"},
                       {"depth", 3},
                       {"ratio", 0.5},
                       {"extra", {{"list", {1, true, nullptr}}, {"name", "x"}}}};
  auto body = chat_body("hi", 2);
  body["chat_template_kwargs"] = kwargs;
  post(c, "/v1/chat/completions", body, 200);
  body["chat_template_kwargs"] = nullptr;
  post(c, "/v1/chat/completions", body, 200);
  body.erase("chat_template_kwargs");
  post(c, "/v1/chat/completions", body, 200);
  auto const got = probe->kwargs();
  REQUIRE(got.size() == 3);
  CHECK(got[0] == kwargs);
  CHECK(got[0]["extra"]["list"][1] == true);
  CHECK(got[1] == json::object());
  CHECK(got[2] == json::object());
  // The lane served model hands them to its codec: the toy template shows them as a first line.
  auto const prompts = probe->prompts();
  REQUIRE(prompts.size() == 3);
  toy_codec const codec;
  json const msgs = {{{"role", "user"}, {"content", "hi"}}};
  CHECK(prompts[0] == codec.encode(codec.render_chat(msgs, kwargs)));
  CHECK(prompts[0] == codec.encode("kwargs: " + kwargs.dump() + "\nuser: hi\nassistant: "));
  CHECK(prompts[1] == codec.encode("user: hi\nassistant: "));
  CHECK(prompts[2] == prompts[1]);

  auto const base = chat_body("hi", 2).dump();
  auto const with = [&](std::string const& kw) {
    return base.substr(0, base.size() - 1) + R"(,"chat_template_kwargs":)" + kw + "}";
  };
  for (auto const* bad : {"true", "[1, 2]", R"("enable_thinking")", "7"}) {
    auto r = c.Post("/v1/chat/completions", with(bad), "application/json");
    REQUIRE(r);
    INFO(bad << " -> " << r->body);
    CHECK(r->status == 400);
    auto j = json::parse(r->body, nullptr, false);
    REQUIRE(j.is_object());
    CHECK(j["error"]["param"] == "chat_template_kwargs");
    CHECK(j["error"]["code"] == "invalid_type");
    CHECK(j["error"]["type"] == "invalid_request_error");
    CHECK(j["error"]["message"].get<std::string>().find("must be an object") != std::string::npos);
  }
  expect_error(c, with(R"({"messages": []})"), 400, "invalid_value");
  CHECK(probe->kwargs().size() == 3);  // none of the refused requests reached the model
  auto m = c.Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find("tf_requests_rejected_total{reason=\"bad_request\"} 5") != std::string::npos);
  post(c, "/v1/chat/completions", body, 200);
  CHECK(probe->kwargs().size() == 4);
}

TEST_CASE("Qwen3's template over the server: enable_thinking false adds the empty think block") {
  auto const gguf =
      tf::model::gguf_file::open(std::string(TF_FIXTURES_DIR) + "/qwen/tiny/tiny-f32.gguf");
  auto const tok = tf::tokenizer::load_tokenizer(gguf);
  tf::tokenizer::text_codec const codec(
      tok, "qwen3-tiny", read_text(std::string(TF_FIXTURES_DIR) + "/jinja/qwen3.jinja"));
  auto const goldens = json::parse(read_text(std::string(TF_FIXTURES_DIR) + "/jinja/goldens.json"));
  auto golden = [&](bool think) {
    auto const name =
        fmt::format("qwen3/system_user/agp=True/think={}/tools=False", think ? "True" : "False");
    for (auto const& g : goldens["chat"])
      if (g["name"] == name) return g;
    FAIL("no golden " << name);
    return json();
  };
  auto const on = golden(true), off = golden(false);
  REQUIRE(on["messages"] == off["messages"]);
  auto const on_text = on["expected"].get<std::string>();
  auto const off_text = off["expected"].get<std::string>();
  CHECK(off_text == on_text + "<think>\n\n</think>\n\n");

  live_server s({}, {}, 0);
  auto probe = std::make_shared<probe_model>(
      std::make_shared<lane_served_model<toy_model, toy_family, tf::tokenizer::text_codec>>(
          std::make_unique<toy_model>(128, 16), codec, host_config{2, 512, 4, 64}));
  s.server->set_model(probe);
  auto c = s.client();
  json body = {{"messages", on["messages"]}, {"max_tokens", 2}, {"temperature", 0}};
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto const r_off = post(c, "/v1/chat/completions", body, 200);
  body["chat_template_kwargs"] = {{"enable_thinking", true}};
  post(c, "/v1/chat/completions", body, 200);
  body.erase("chat_template_kwargs");
  post(c, "/v1/chat/completions", body, 200);

  auto const prompts = probe->prompts();
  REQUIRE(prompts.size() == 3);
  CHECK(prompts[0] == codec.encode(off_text));
  CHECK(prompts[1] == codec.encode(on_text));
  CHECK(prompts[2] == prompts[1]);  // the template's default is to think
  CHECK(prompts[0] != prompts[1]);
  CHECK(r_off["usage"]["prompt_tokens"] == prompts[0].size());
  CHECK(tok.decode(prompts[0], true) == off_text);
  CHECK(codec.render_chat(on["messages"], {{"enable_thinking", false}}) == off_text);
  CHECK(codec.render_chat(on["messages"], {{"enable_thinking", true}}) == on_text);
}

TEST_CASE("a hybrid model over HTTP: /v1/load shows lanes and state slots, /metrics the reuse") {
  live_server s({}, {}, 0);
  // 6 slots at --parallel 2: 2 lane snapshots, 4 for streams and kept prompt states.
  s.server->set_model(
      std::make_shared<lane_served_model<hybrid_toy_model, hybrid_toy_family, toy_codec>>(
          std::make_unique<hybrid_toy_model>(64, 16, 6), toy_codec{}, host_config{2, 512, 4, 64}));
  auto c = s.client();
  std::string const prompt(80, 'h');
  json body = {{"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}};
  auto const first = post(c, "/v1/completions", body, 200);
  auto const again = post(c, "/v1/completions", body, 200);
  CHECK(again["tf"]["token_sha"] == first["tf"]["token_sha"]);
  auto load = json::parse(c.Get("/v1/load")->body);
  for (int i = 0; i < 100 && load["running"] != 0; ++i) {
    std::this_thread::sleep_for(20ms);
    load = json::parse(c.Get("/v1/load")->body);
  }
  INFO(load.dump());
  CHECK(load["lanes"] == json{{"total", 2}, {"free", 2}});
  CHECK(load["state_slots"]["total"] == 4);
  // Two kept states: before the prompt's last token (80 tokens, the same prompt reuses it) and
  // after the whole first reply (a next turn would reuse it); the second reply was the same.
  CHECK(load["state_slots"]["held"] == 2);
  CHECK(load["state_slots"]["free"] == 2);
  auto m = c.Get("/metrics");
  REQUIRE(m);
  CHECK(m->body.find("\ntf_state_slots_total 4\n") != std::string::npos);
  CHECK(m->body.find("\ntf_lanes_total 2\n") != std::string::npos);
  CHECK(m->body.find("\ntf_prompt_tokens_reused_total 80\n") != std::string::npos);
  auto census = s.server->model()->count();
  CHECK(census.balanced());
  CHECK(
      census.line() ==
      fmt::format("promised 0, free {} + store 6 == total 64; slots free 2 + held 2 == 4", 64 - 6));
}
