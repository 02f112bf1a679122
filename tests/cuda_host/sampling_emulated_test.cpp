// Device sampling through backend::cuda's host code on the CPU, without a GPU: the real
// tf::engine<Family, backend::cuda> over the fake CUDA runtime, its sampling launcher emulated on
// the host in the kernels' order (host_sample_launchers.hpp: portable::sample_math::sample_row_reference,
// std::sort in place of CUB's radix sort). So this checks the plumbing (params, adjustments and
// scratch on the device, only results copied back, errors) and the order's spec against the CPU
// sampler; scripts/gpu-check.sh runs tests/cuda/sampling_test.cpp on a GPU.
//
// Over tiny fixtures, a batch of streams with different params (greedy, penalties, logit bias,
// seeded temperature, top-k, top-p, min-p, top logprobs) runs several steps; each step samples
// once through engine.forward_sample (device) and once from the same forward's host logits with
// twin samplers (sampler::sample): the tokens must be equal, the logprobs within 1e-5 + 1e-6 |lp|.
#include <tests/common/sampling_mix.hpp>
#include <tests/cuda_host/emulated_engine.hpp>
#include <tests/cuda_host/fake_cuda_runtime.hpp>
#include <tests/cuda_host/host_launchers.hpp>

#include <tf/backend/cuda.hpp>
#include <tf/engine.hpp>
#include <tf/grammar/response_format.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using tf::backend::cuda;
using tf::sample::sample_result;
using tf::sample::sampler;
using tf::sample::sampling_params;

namespace {

static_assert(tf::backend::device_sampling<cuda>);
static_assert(!tf::backend::device_sampling<tf::backend::cpu>);

bool close(float a, float b) {
  return a == b || std::abs(static_cast<double>(a) - b) <= 1e-5 + 1e-6 * std::abs(a);
}

struct stream {
  std::vector<std::int32_t> tokens;  // prompt + generated
  std::vector<std::int32_t> pages;
  std::size_t pos = 0;  // tokens in the KV
};

// Runs `ps` as one batch for `steps` steps over `e`: each step both ways, tokens compared.
template <class Engine>
void run_batch(Engine& e, std::vector<sampling_params> const& ps, int steps, bool want_device) {
  auto const vocab = e.vocab_size();
  std::size_t const n = ps.size();
  std::vector<sampler> dev, cpu;
  std::vector<stream> streams(n);
  for (std::size_t i = 0; i < n; ++i) {
    dev.emplace_back(ps[i]);
    cpu.emplace_back(ps[i]);
    for (int t = 0; t < 3 + static_cast<int>(i); ++t)
      streams[i].tokens.push_back(static_cast<std::int32_t>((5 + 13 * i + 7 * t) % vocab));
    for (std::int32_t p = 0; p < 4; ++p)
      streams[i].pages.push_back(static_cast<std::int32_t>(i) * 4 + p);
  }
  std::vector<float> logits;
  for (int s = 0; s < steps; ++s) {
    std::vector<tf::batch_row> rows;
    std::vector<std::span<std::int32_t const>> histories;
    for (auto& st : streams) {
      auto const all = std::span<std::int32_t const>(st.tokens);
      rows.push_back({all.subspan(st.pos), static_cast<std::int32_t>(st.pos), st.pages});
      histories.push_back(all);
    }
    logits.assign(n * static_cast<std::size_t>(vocab), 0.0f);
    e.forward(rows, logits.data());
    std::vector<sample_result> want(n), got(n);
    for (std::size_t i = 0; i < n; ++i)
      want[i] =
          cpu[i].sample(std::span<float const>(logits).subspan(i * vocab, vocab), histories[i]);
    std::vector<sampler*> ptrs;
    for (auto& d : dev) ptrs.push_back(&d);
    std::size_t const copied = fake_cuda::to_host_bytes();
    e.forward_sample(rows, ptrs, histories, got);  // the same KV positions, rewritten alike
    std::size_t const back = fake_cuda::to_host_bytes() - copied;
    if (want_device)
      CHECK(back < n * static_cast<std::size_t>(vocab) * sizeof(float));  // no logits came back
    else
      CHECK(back >= n * static_cast<std::size_t>(vocab) * sizeof(float));
    for (std::size_t i = 0; i < n; ++i) {
      INFO("step " << s << " row " << i);
      REQUIRE(got[i].token == want[i].token);
      if (std::isnan(want[i].logprob))
        CHECK(std::isnan(got[i].logprob));
      else
        CHECK(close(got[i].logprob, want[i].logprob));
      REQUIRE(got[i].top.size() == want[i].top.size());
      for (std::size_t k = 0; k < want[i].top.size(); ++k) {
        CHECK(got[i].top[k].token == want[i].top[k].token);
        CHECK(close(got[i].top[k].logprob, want[i].top[k].logprob));
      }
      streams[i].pos = streams[i].tokens.size();
      streams[i].tokens.push_back(want[i].token);
    }
  }
}

// A json_schema grammar over a toy token table of the model's vocabulary size.
std::shared_ptr<tf::grammar::constraint const> toy_grammar(std::int64_t vocab) {
  std::vector<std::string> const pieces = {"{",   "}",    "\"", "{\"",   "a", "\":", "1",
                                           "\"}", "ab\"", " ",  "<eos>", "2", "x"};
  std::vector<std::string> table;
  for (std::int64_t t = 0; t < vocab; ++t)
    table.push_back(pieces[static_cast<std::size_t>(t) % pieces.size()]);
  auto const rf = tf::grammar::parse_response_format(
      nlohmann::json{{"type", "json_schema"},
                     {"json_schema",
                      {{"name", "t"},
                       {"schema",
                        {{"type", "object"},
                         {"properties", {{"a", {{"type", "integer"}}}}},
                         {"required", {"a"}},
                         {"additionalProperties", false}}}}}});
  return tf::grammar::bind_grammar(
      rf, std::make_shared<tf::grammar::token_table const>(std::move(table)), {10});
}

template <class Fn>
void with_engine(std::string const& rel, Fn&& fn) {
  tf::test::emulated::with_engine<cuda>(fs::path(TF_FIXTURES_DIR) / rel,
                                        {64, 16, tf::kv_dtype::f32, 0}, {}, fn);
}

}  // namespace

TEST_CASE("device sampling on the emulated backend picks the CPU sampler's tokens") {
  for (std::string const rel : {"qwen/tiny/tiny-f32.gguf", "gemma/tiny/tiny-f32.gguf"}) {
    INFO(rel);
    with_engine(rel, [&](auto& e) {
      auto const vocab = static_cast<std::int32_t>(e.vocab_size());
      run_batch(e, tf::test::sampling_mix(vocab), 6, true);
      // One row alone, and the whole batch again from fresh streams: the same tokens as batched.
      run_batch(e, {tf::test::sampling_mix(vocab)[4]}, 4, true);
    });
  }
}

TEST_CASE("a grammar or many top logprobs in the batch sample every row on the host") {
  with_engine("qwen/tiny/tiny-f32.gguf", [&](auto& e) {
    auto const vocab = e.vocab_size();
    auto ps = tf::test::sampling_mix(static_cast<std::int32_t>(vocab));
    ps[2].constraint = toy_grammar(vocab);
    CHECK_FALSE(sampler(ps[2]).device_eligible());
    run_batch(e, ps, 4, false);
    ps = tf::test::sampling_mix(static_cast<std::int32_t>(vocab));
    ps[0].top_logprobs = tf::kernels::portable::sample_math::max_top_logprobs + 1;
    run_batch(e, ps, 2, false);
  });
}

TEST_CASE("device sampling errors reach the caller as the CPU sampler's") {
  using Catch::Matchers::Contains;
  namespace sm = tf::kernels::portable::sample_math;
  with_engine("qwen/tiny/tiny-f32.gguf", [&](auto& e) {
    auto const vocab = static_cast<std::int32_t>(e.vocab_size());
    std::vector<sm::row_params> rows(2);
    std::vector<sm::row_result> out(2);
    CHECK_THROWS_WITH(e.backend().sample_rows(rows, {}, out),
                      Contains("device sampling of 0 logit rows got 2 params"));
    std::vector<std::int32_t> const toks{1, 2, 3}, pages{0};
    tf::batch_row const row{toks, 0, pages};
    e.forward({&row, 1}, nullptr);  // the logits stay on the device
    rows.resize(1);
    out.resize(1);
    rows[0].adjust_begin = 2;
    rows[0].adjust_count = 1;
    CHECK_THROWS_WITH(e.backend().sample_rows(rows, {}, out), Contains("names adjustments"));
    // Presence and frequency penalties of 3e38 on every token leave nothing but -inf.
    std::vector<sm::logit_adjust> adjust;
    for (std::int32_t t = 0; t < vocab; ++t) adjust.push_back({t, 1, 0.0f});
    rows[0] = {};
    rows[0].temperature = 1.0f;
    rows[0].presence_penalty = 3e38f;
    rows[0].frequency_penalty = 3e38f;
    rows[0].adjust_count = vocab;
    rows[0].penalty_count = vocab;
    CHECK_THROWS_WITH(e.backend().sample_rows(rows, adjust, out),
                      Contains("every logit is -inf after the penalties"));
    rows[0].adjust_count = 0;
    rows[0].penalty_count = 0;
    e.backend().sample_rows(rows, adjust, out);
    CHECK(out[0].status == sm::sampled);
    CHECK(std::isfinite(out[0].logprob));
  });
}
