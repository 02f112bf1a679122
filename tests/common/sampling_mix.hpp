#pragma once
// Eight requests' sampling params that between them use every option the device sampler takes,
// each with its own seed: greedy; penalties with a logit bias that names one token twice and top
// logprobs; temperature alone; top-k; top-p with min-p; a narrow top-p with the most top logprobs
// the device reports; a wide top-k without logprobs; min-p alone.
#include <tf/sample/sampler.hpp>

#include <cstdint>
#include <vector>

namespace tf::test {

/// The mix for a vocabulary of `vocab` tokens (the bias names tokens 3 and 5, modulo vocab).
inline std::vector<sample::sampling_params> sampling_mix(std::int32_t vocab) {
  std::vector<sample::sampling_params> ps(8);
  ps[1] = {.repetition_penalty = 1.3f, .presence_penalty = 0.4f, .top_logprobs = 5};
  ps[1].logit_bias = {{3 % vocab, 2.5f}, {5 % vocab, -1.0f}, {3 % vocab, 0.25f}};
  ps[2] = {.temperature = 0.8f, .seed = 7};
  ps[3] = {.temperature = 1.0f, .top_k = 5, .frequency_penalty = 0.3f, .seed = 8};
  ps[4] = {.temperature = 1.2f, .top_p = 0.9f, .min_p = 0.05f, .seed = 9};
  ps[5] = {.temperature = 0.6f,
           .top_p = 0.5f,
           .repetition_penalty = 1.1f,
           .seed = 10,
           .top_logprobs = 20};
  ps[6] = {.temperature = 1.5f, .top_k = 80, .seed = 11, .logprobs = false};
  ps[7] = {.temperature = 1.0f, .min_p = 0.02f, .seed = 12};
  return ps;
}

}  // namespace tf::test
