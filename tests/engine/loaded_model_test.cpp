// Tests include/tf/engine/loaded_model.hpp: generate() on the default model.
#include <families/gemma/gemma3.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/open.hpp>
#include <tf/model/default_model.hpp>
#include <tf/sample/sampler.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
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
