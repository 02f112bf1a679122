// Tests include/tf/engine/loaded_model.hpp: generate() on the default model.
#include <families/gemma/gemma3.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/open.hpp>
#include <tf/model/default_model.hpp>
#include <tf/sample/sampler.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <vector>
#include "../common/cannot_run.hpp"

// generate() feeds a prompt longer than loaded_model::prefill_chunk in several forwards and
// samples after the last one only: its tokens and log-probabilities are those of the whole prompt
// in one forward, through the same seeded sampler (so the logits' bits are the same too).
TEST_CASE("generate() over a prompt of three chunks equals the prompt in one forward") {
  auto const path = tf::model::resolve_model_path(std::nullopt);
  if (!std::filesystem::exists(path)) {
    tf::test::cannot_run("the default model (Gemma 3 270M Q4_K_M) is absent");
    return;
  }
  tf::open_options opt;
  opt.threads = 2;
  opt.context = 2048;
  tf::loaded_engine<tf::families::gemma::gemma3, tf::backend::cpu> m(
      tf::model::model_file::open(path), path, opt);
  auto const chunk = tf::loaded_model::prefill_chunk;
  auto const vocab = static_cast<std::int32_t>(m.vocab_size());
  std::mt19937 gen(7);
  std::vector<std::int32_t> prompt{2};
  while (prompt.size() < 2 * chunk + 77)
    prompt.push_back(std::uniform_int_distribution<std::int32_t>(3, vocab - 1)(gen));
  tf::sample::sampling_params sp;
  sp.temperature = 0.8f;
  sp.seed = 11;
  sp.top_logprobs = 3;
  std::vector<tf::sample::sample_result> got;
  m.generate(
      prompt, sp, 3,
      [&](tf::sample::sample_result const& r) {
        got.push_back(r);
        return true;
      },
      false);
  REQUIRE(got.size() == 3);

  std::vector<std::int32_t> pages(static_cast<std::size_t>(m.kv().num_pages));
  for (std::size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<std::int32_t>(i);
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  std::vector<std::int32_t> history = prompt;
  tf::sample::sampler s(sp);
  tf::batch_row row{prompt, 0, pages};
  m.forward({&row, 1}, logits.data());
  for (std::size_t i = 0; i < got.size(); ++i) {
    auto const r = s.sample(logits, history);
    INFO("token " << i);
    CHECK(r.token == got[i].token);
    CHECK(r.logprob == got[i].logprob);
    REQUIRE(r.top.size() == got[i].top.size());
    for (std::size_t k = 0; k < r.top.size(); ++k) {
      CHECK(r.top[k].token == got[i].top[k].token);
      CHECK(r.top[k].logprob == got[i].top[k].logprob);
    }
    history.push_back(r.token);
    tf::batch_row next{{&history.back(), 1}, static_cast<std::int32_t>(history.size() - 1), pages};
    m.forward({&next, 1}, logits.data());
  }
}

// store_bytes() is what serve counts for a draft model's stores before they are written: K and V
// (f16) of every attention layer at every position of every stream, from the file's own config,
// plus a state slot per stream where the model has recurrent layers.
TEST_CASE("store_bytes() counts every stream's KV positions and state slots") {
  std::ifstream in(TF_FIXTURES_DIR "/gemma/tiny/config.json");
  REQUIRE(in);
  auto const cfg = nlohmann::json::parse(in);
  auto const per_token = 2u * cfg.at("num_hidden_layers").get<std::uint64_t>() *
                         cfg.at("num_key_value_heads").get<std::uint64_t>() *
                         cfg.at("head_dim").get<std::uint64_t>() * 2u;  // f16
  auto dense = tf::open(TF_FIXTURES_DIR "/gemma/tiny/tiny-f32.gguf", {.kv = tf::kv_dtype::f16});
  for (std::int32_t streams : {1, 3}) {
    dense->set_streams(64, streams);
    auto const k = dense->kv();
    CHECK(k.num_state_slots == streams);
    CHECK(static_cast<std::int64_t>(k.num_pages) * k.page_tokens >= 64 * streams);
    CHECK(dense->store_bytes() == static_cast<std::uint64_t>(k.num_pages) *
                                      static_cast<std::uint64_t>(k.page_tokens) * per_token);
  }
  // A hybrid adds one state slot per stream: the same KV, and a state term that grows with them.
  auto hybrid = tf::open(TF_FIXTURES_DIR "/qwen/tiny35/tiny-f32.gguf");
  hybrid->set_streams(64, 1);
  auto const one = hybrid->store_bytes();
  auto const one_pages = hybrid->kv().num_pages;
  hybrid->set_streams(64, 2);
  auto const two = hybrid->store_bytes();
  REQUIRE(hybrid->kv().num_pages == 2 * one_pages);
  CHECK(two == 2 * one);
  CHECK(hybrid->recurrent());
}
