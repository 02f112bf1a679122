// Sampling on a CUDA device (scripts/gpu-check.sh; without a device these print why and pass):
// the kernels (kernels/cuda/sample.cuh) over random logit rows give the CPU sampler's tokens and
// sample_math::sample_row_reference's, logprobs within 1e-5 + 1e-6 |lp|; and a tiny fixture's
// engine samples a batch of differently configured streams over several steps through
// engine::forward_sample exactly as its host logits through sampler::sample. The same plumbing
// runs on the CPU over the host copy of the kernels in tests/cuda_host/sampling_emulated_test.cpp.
#include <tests/common/sampling_mix.hpp>
#include <tf/backend/cuda.hpp>
#include <tf/engine.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <span>
#include <vector>

namespace fs = std::filesystem;
namespace sm = tf::kernels::portable::sample_math;
using tf::backend::cuda;
using tf::sample::sample_result;
using tf::sample::sampler;
using tf::sample::sampling_params;

namespace {

bool have_device() {
  if (tf::backend::cuda_parts::device_count() > 0) return true;
  std::printf("SKIP (GPU test): no CUDA device is visible\n");
  return false;
}

bool close(float a, float b) {
  return a == b || std::abs(static_cast<double>(a) - b) <= 1e-5 + 1e-6 * std::abs(a);
}

}  // namespace

TEST_CASE("the CUDA sampling kernels pick the CPU sampler's tokens over random rows") {
  if (!have_device()) return;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  tf::backend::cuda_parts::device_sampler ds;
  for (std::int64_t vocab : {7, 1000, 32000, 262144}) {
    auto const ps = tf::test::sampling_mix(static_cast<std::int32_t>(vocab));
    auto const rows = static_cast<std::int64_t>(ps.size());
    std::vector<sampler> cpu, dev;
    for (auto const& p : ps) {
      cpu.emplace_back(p);
      dev.emplace_back(p);
    }
    std::vector<std::int32_t> history{1, 2, 2, 5};
    for (int step = 0; step < 20; ++step) {
      std::vector<float> logits(static_cast<std::size_t>(rows * vocab));
      for (auto& x : logits) x = step % 4 == 3 ? std::round(normal(rng)) : normal(rng);  // ties
      tf::backend::cuda_parts::device_array<float> d;
      d.upload(logits.data(), logits.size());
      std::vector<sm::row_params> params;
      std::vector<sm::logit_adjust> adjust;
      for (auto& s : dev)
        params.push_back(s.device_row(static_cast<std::size_t>(vocab), history, adjust));
      std::vector<sm::row_result> out(ps.size());
      ds.run(d.data(), rows, vocab, params, adjust, out, nullptr);
      for (std::int64_t r = 0; r < rows; ++r) {
        INFO("vocab " << vocab << " step " << step << " row " << r);
        auto const row = std::span<float const>(logits).subspan(r * vocab, vocab);
        auto const want = cpu[r].sample(row, history);
        auto const ref = sm::sample_row_reference(row.data(), vocab, params[r],
                                                  adjust.data() + params[r].adjust_begin);
        auto const& got = out[r];
        REQUIRE(got.token == ref.token);
        REQUIRE(got.token == want.token);
        if (std::isnan(want.logprob))
          CHECK(std::isnan(got.logprob));
        else
          CHECK(close(want.logprob, got.logprob));
        REQUIRE(static_cast<std::size_t>(got.top_count) == want.top.size());
        for (std::size_t k = 0; k < want.top.size(); ++k) {
          CHECK(got.top_token[k] == want.top[k].token);
          CHECK(close(want.top[k].logprob, got.top_logprob[k]));
        }
      }
      history.push_back(static_cast<std::int32_t>(rng() % vocab));
    }
  }
}

TEST_CASE("a tiny fixture on CUDA: forward_sample gives the host sampler's tokens, step by step") {
  if (!have_device()) return;
  auto const path = fs::path(TF_FIXTURES_DIR) / "gemma/tiny/tiny-f32.gguf";
  auto file = tf::model::model_file::open(path, tf::model::load_mode::map);
  tf::with_family<tf::families::builtin, cuda>(file, [&](auto t) {
    tf::engine<typename decltype(t)::type, cuda> e(file, {64, 16, tf::kv_dtype::f32, 0});
    auto const vocab = static_cast<std::size_t>(e.vocab_size());
    auto const ps = tf::test::sampling_mix(static_cast<std::int32_t>(vocab));
    std::size_t const n = ps.size();
    std::vector<sampler> cpu, dev;
    std::vector<std::vector<std::int32_t>> tokens(n), pages(n);
    std::vector<std::size_t> pos(n, 0);
    for (std::size_t i = 0; i < n; ++i) {
      cpu.emplace_back(ps[i]);
      dev.emplace_back(ps[i]);
      for (std::size_t k = 0; k < 3 + i; ++k)
        tokens[i].push_back(static_cast<std::int32_t>((5 + 13 * i + 7 * k) % vocab));
      for (std::int32_t p = 0; p < 4; ++p) pages[i].push_back(static_cast<std::int32_t>(i) * 4 + p);
    }
    std::vector<float> logits(n * vocab);
    for (int step = 0; step < 8; ++step) {
      std::vector<tf::batch_row> rows;
      std::vector<std::span<std::int32_t const>> histories;
      std::vector<sampler*> ptrs;
      for (std::size_t i = 0; i < n; ++i) {
        auto const all = std::span<std::int32_t const>(tokens[i]);
        rows.push_back({all.subspan(pos[i]), static_cast<std::int32_t>(pos[i]), pages[i]});
        histories.push_back(all);
        ptrs.push_back(&dev[i]);
      }
      e.forward(rows, logits.data());
      std::vector<sample_result> got(n);
      e.forward_sample(rows, ptrs, histories, got);
      for (std::size_t i = 0; i < n; ++i) {
        INFO("step " << step << " row " << i);
        auto const want =
            cpu[i].sample(std::span<float const>(logits).subspan(i * vocab, vocab), histories[i]);
        REQUIRE(got[i].token == want.token);
        if (!std::isnan(want.logprob)) CHECK(close(want.logprob, got[i].logprob));
        pos[i] = tokens[i].size();
        tokens[i].push_back(want.token);
      }
    }
  });
}
