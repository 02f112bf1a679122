// What evaluation clients send (toy model): echo with logprobs scores the prompt, equal bit for
// bit to the same tokens generated; max_tokens 0 scores without generating; vLLM's
// prompt_logprobs; OpenAI's four prompt forms, each prompt its own choices; bad token ids refused.
#include <tf/serve/http_server.hpp>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "http_test_server.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using namespace tf::serve::test;
using nlohmann::json;

namespace {

json greedy(json prompt, int max_tokens) {
  return {{"prompt", std::move(prompt)}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// The toy codec's ids of a text: BOS, then its bytes.
std::vector<std::int32_t> ids_of(std::string const& text) {
  std::vector<std::int32_t> out{toy_vocab::bos};
  for (unsigned char c : text) out.push_back(c);
  return out;
}

// The streamed choice's logprobs object, its pieces concatenated in order.
json streamed_logprobs(std::string const& body) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (auto const& e : sse_events(body)) {
    if (e == "[DONE]") continue;
    auto const j = json::parse(e);
    for (auto const& ch : j["choices"])
      if (ch.contains("logprobs") && ch["logprobs"].is_object())
        for (auto const& key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
          for (auto const& v : ch["logprobs"][key]) out[key].push_back(v);
  }
  return out;
}

}  // namespace

TEST_CASE("echo + logprobs: the prompt's logprobs equal the same tokens generated, bit for bit") {
  live_server s;
  auto c = s.client();
  auto gen = greedy("the quick", 12);
  gen["logprobs"] = 3;
  auto const generated = post(c, "/v1/completions", gen, 200);
  auto const text = generated["choices"][0]["text"].get<std::string>();
  auto const& glp = generated["choices"][0]["logprobs"];
  REQUIRE(glp["token_logprobs"].size() == 12);

  // The prompt and its greedy continuation, scored without generating.
  auto score = greedy("the quick" + text, 0);
  score["echo"] = true;
  score["logprobs"] = 3;
  auto const scored = post(c, "/v1/completions", score, 200);
  auto const& choice = scored["choices"][0];
  CHECK(choice["text"] == "the quick" + text);
  CHECK(scored["usage"]["completion_tokens"] == 0);
  auto const& lp = choice["logprobs"];
  auto const prompt_len = ids_of("the quick").size();
  REQUIRE(lp["tokens"].size() == prompt_len + 12);
  CHECK(lp["token_logprobs"][0].is_null());
  CHECK(lp["top_logprobs"][0].is_null());
  for (std::size_t k = 0; k < 12; ++k) {
    INFO("generated token " << k);
    CHECK(lp["tokens"][prompt_len + k] == glp["tokens"][k]);
    CHECK(lp["token_logprobs"][prompt_len + k] == glp["token_logprobs"][k]);
    CHECK(lp["top_logprobs"][prompt_len + k] == glp["top_logprobs"][k]);
  }
  // Offsets are bytes of the echoed text: BOS adds none, each byte token one.
  CHECK(lp["text_offset"][0] == 0);
  CHECK(lp["text_offset"][1] == 0);
  CHECK(lp["text_offset"][prompt_len + 11] == prompt_len - 1 + 11);

  // Sent again (its prefix now kept by the prompt store) it runs afresh, with the same answer.
  auto const again = post(c, "/v1/completions", score, 200);
  CHECK(again["choices"][0]["logprobs"] == lp);
  CHECK(again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);

  // Streamed: the echo chunk carries the prompt's logprobs, then the generated tokens' follow.
  auto stream = score;
  stream["stream"] = true;
  stream["max_tokens"] = 4;
  auto r = c.Post("/v1/completions", stream.dump(), "application/json");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  auto const slp = streamed_logprobs(r->body);
  REQUIRE(slp["tokens"].size() == prompt_len + 12 + 4);
  for (std::size_t k = 0; k < prompt_len + 12; ++k) {
    CHECK(slp["token_logprobs"][k] == lp["token_logprobs"][k]);
    CHECK(slp["text_offset"][k] == lp["text_offset"][k]);
  }
  CHECK(slp["text_offset"][prompt_len + 12] == prompt_len - 1 + 12);
  CHECK(s.server->model()->count().balanced());
}

TEST_CASE("echo + logprobs among other streams: equal to the lone request's") {
  live_server s;
  auto c = s.client();
  auto score = greedy("a prompt that others run beside", 2);
  score["echo"] = true;
  score["logprobs"] = 1;
  auto const alone = post(c, "/v1/completions", score, 200);
  std::vector<std::future<json>> others;
  for (int i = 0; i < 3; ++i)
    others.push_back(std::async(std::launch::async, [&s, i] {
      auto oc = s.client();
      return post(oc, "/v1/completions", greedy(std::string(8 + i, 'x'), 40), 200);
    }));
  auto const beside = post(c, "/v1/completions", score, 200);
  for (auto& o : others) CHECK(o.get()["choices"].size() == 1);
  CHECK(beside["choices"][0]["logprobs"] == alone["choices"][0]["logprobs"]);
  CHECK(beside["choices"][0]["text"] == alone["choices"][0]["text"]);
}

TEST_CASE("prompt_logprobs (vLLM): null first, then each token's logprob and rank") {
  live_server s;
  auto c = s.client();
  auto body = greedy("scored", 0);
  body["prompt_logprobs"] = 2;
  auto const r = post(c, "/v1/completions", body, 200);
  auto const& pl = r["choices"][0]["prompt_logprobs"];
  REQUIRE(pl.size() == ids_of("scored").size());
  CHECK(pl[0].is_null());
  auto echo = greedy("scored", 0);
  echo["echo"] = true;
  echo["logprobs"] = 0;
  auto const e = post(c, "/v1/completions", echo, 200);
  auto const& elp = e["choices"][0]["logprobs"];
  auto const ids = ids_of("scored");
  for (std::size_t k = 1; k < ids.size(); ++k) {
    INFO("prompt token " << k);
    auto const& entry = pl[k][std::to_string(ids[k])];
    CHECK(entry["logprob"] == elp["token_logprobs"][k]);
    CHECK(entry["rank"].get<int>() >= 1);
    CHECK(entry["decoded_token"] == std::string(1, static_cast<char>(ids[k])));
    // The token and up to two alternatives: ranks 1 and 2 are among them.
    CHECK(pl[k].size() >= 2);
    CHECK(pl[k].size() <= 3);
    CHECK(elp["top_logprobs"][k].size() == 0);
  }
  CHECK(r["usage"]["completion_tokens"] == 0);
  CHECK(r["choices"][0]["text"] == "");
  CHECK(r["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("OpenAI's four prompt forms; each prompt's choices equal the prompt sent alone") {
  live_server s;
  auto c = s.client();
  auto const one = post(c, "/v1/completions", greedy("hello", 8), 200);
  auto const two = post(c, "/v1/completions", greedy("world", 8), 200);
  auto const h = one["choices"][0]["text"], w = two["choices"][0]["text"];

  auto const strings = post(c, "/v1/completions", greedy(json::array({"hello", "world"}), 8), 200);
  REQUIRE(strings["choices"].size() == 2);
  CHECK(strings["choices"][0]["index"] == 0);
  CHECK(strings["choices"][0]["text"] == h);
  CHECK(strings["choices"][1]["index"] == 1);
  CHECK(strings["choices"][1]["text"] == w);
  CHECK(strings["usage"]["prompt_tokens"] == ids_of("hello").size() + ids_of("world").size());
  CHECK(strings["tf"]["choices"][1]["token_sha"] == two["tf"]["token_sha"]);

  auto const ids = post(c, "/v1/completions", greedy(ids_of("hello"), 8), 200);
  REQUIRE(ids["choices"].size() == 1);
  CHECK(ids["choices"][0]["text"] == h);

  auto const id_lists =
      post(c, "/v1/completions", greedy(json::array({ids_of("world"), ids_of("hello")}), 8), 200);
  REQUIRE(id_lists["choices"].size() == 2);
  CHECK(id_lists["choices"][0]["text"] == w);
  CHECK(id_lists["choices"][1]["text"] == h);

  // Echo of token ids repeats their text; n choices per prompt come prompt by prompt.
  auto echo = greedy(json::array({ids_of("ab"), ids_of("cd")}), 3);
  echo["echo"] = true;
  echo["n"] = 2;
  echo["temperature"] = 1.0;
  echo["seed"] = 5;
  auto const en = post(c, "/v1/completions", echo, 200);
  REQUIRE(en["choices"].size() == 4);
  for (int i = 0; i < 4; ++i) {
    CHECK(en["choices"][i]["index"] == i);
    CHECK(en["choices"][i]["text"].get<std::string>().rfind(i < 2 ? "ab" : "cd", 0) == 0);
  }
  // A prompt's k-th choice samples with seed + k, whichever prompt it follows.
  auto solo = greedy(ids_of("cd"), 3);
  solo["temperature"] = 1.0;
  solo["seed"] = 6;
  CHECK("cd" + post(c, "/v1/completions", solo, 200)["choices"][0]["text"].get<std::string>() ==
        en["choices"][3]["text"]);

  // Streamed, the choices arrive by index.
  auto st = greedy(json::array({"hello", "world"}), 8);
  st["stream"] = true;
  auto r = c.Post("/v1/completions", st.dump(), "application/json");
  REQUIRE(r);
  INFO(r->body);
  REQUIRE(r->status == 200);
  std::map<int, std::string> texts;
  for (auto const& e : sse_events(r->body)) {
    if (e == "[DONE]") continue;
    auto const j = json::parse(e);
    for (auto const& ch : j["choices"])
      texts[ch["index"].get<int>()] += ch["text"].get<std::string>();
  }
  CHECK(texts[0] == h);
  CHECK(texts[1] == w);
  CHECK(s.server->model()->count().balanced());
}

TEST_CASE("bad prompts: ids outside the vocabulary name the first, empty or mixed forms refused") {
  live_server s;
  auto c = s.client();
  auto check_400 = [&](json const& prompt, std::string const& says) {
    auto r = c.Post("/v1/completions", greedy(prompt, 2).dump(), "application/json");
    REQUIRE(r);
    INFO(prompt.dump() << " -> " << r->body);
    CHECK(r->status == 400);
    auto const j = json::parse(r->body);
    CHECK(j["error"]["param"] == "prompt");
    CHECK(j["error"]["message"].get<std::string>().find(says) != std::string::npos);
  };
  check_400(json::array({1, 2, 9999, 10000}), "token id 9999 at position 2");
  check_400(json::array({json::array({1, 2}), json::array({3, 258})}),
            "'prompt' 1 has token id 258");
  check_400(json::array({1, -3}), "not a token id");
  check_400(json::array(), "not empty");
  check_400(json::array({json::array()}), "empty array of token ids");
  check_400(json::array({"a", 3}), "all of them strings");
  check_400(json::array({1, "a"}), "token-id arrays");
  check_400(json::array({json::array({1}), 2}), "all arrays");
  auto zero = greedy("abc", 0);
  auto r = c.Post("/v1/completions", zero.dump(), "application/json");
  REQUIRE(r);
  CHECK(r->status == 400);
  // Still serving, and nothing was held for the refused requests.
  post(c, "/v1/completions", greedy(json::array({1, 2, 3}), 2), 200);
  CHECK(s.server->model()->count().balanced());
}

namespace {

std::uint64_t counter(httplib::Client& c, std::string const& name) {
  auto const m = c.Get("/metrics");
  REQUIRE(m);
  auto const at = m->body.find("\n" + name + " ");
  REQUIRE(at != std::string::npos);
  return std::stoull(m->body.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("n > 1 reads the prompt once: the other choices reuse its pages, replies unchanged") {
  live_server s;
  auto c = s.client();
  std::string const prompt(150, 'p');
  auto body = greedy(prompt, 6);
  body["temperature"] = 1.0;
  body["seed"] = 40;
  body["n"] = 3;
  auto const before = counter(c, "tf_prompt_tokens_total");
  auto const shared = post(c, "/v1/completions", body, 200);
  auto const read = counter(c, "tf_prompt_tokens_total") - before;
  // A prompt no request sent before: the first choice reads all of it (BOS + 150), each other
  // one its last token only.
  CHECK(read == 151 + 2);
  REQUIRE(shared["choices"].size() == 3);
  for (int k = 0; k < 3; ++k) {
    auto one = greedy(prompt, 6);
    one["temperature"] = 1.0;
    one["seed"] = 40 + k;
    CHECK(post(c, "/v1/completions", one, 200)["choices"][0]["text"] ==
          shared["choices"][k]["text"]);
  }
  // Two prompts of n = 2 each, both at once: each prompt's second choice waits for its own first.
  auto two = greedy(json::array({std::string(90, 'a'), std::string(70, 'b')}), 3);
  two["n"] = 2;
  auto const before2 = counter(c, "tf_prompt_tokens_total");
  auto const r2 = post(c, "/v1/completions", two, 200);
  // Each first choice reuses the BOS kept from the requests above and reads the rest.
  CHECK(counter(c, "tf_prompt_tokens_total") - before2 == 90 + 1 + 70 + 1);
  CHECK(r2["choices"][0]["text"] == r2["choices"][1]["text"]);
  CHECK(r2["choices"][2]["text"] == r2["choices"][3]["text"]);
  CHECK(s.server->model()->count().balanced());
}
