#pragma once
/// Server-wide sampling defaults: what a request that names no temperature, top-k, top-p, min-p or
/// repetition penalty samples with, and where each value came from (the model file, a flag, or
/// llama-server's defaults).
#include <tf/sample/sampler.hpp>

#include <fmt/format.h>

#include <string>

namespace tf::sample {

/// One default and its source, e.g. {0.6, "general.sampling.temp"}.
template <class T>
struct sourced {
  T value;
  std::string source;
};

/// Defaults for the fields a request may leave out. Out of the box they are llama-server's
/// (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, no repetition penalty).
struct sampling_defaults {
  sourced<float> temperature{0.8f, "llama-server"};
  sourced<int> top_k{40, "llama-server"};
  sourced<float> top_p{0.95f, "llama-server"};
  sourced<float> min_p{0.05f, "llama-server"};
  sourced<float> repetition_penalty{1.0f, "llama-server"};

  /// A request's sampling before its own fields are read.
  sampling_params params() const {
    sampling_params p;
    p.temperature = temperature.value;
    p.top_k = top_k.value;
    p.top_p = top_p.value;
    p.min_p = min_p.value;
    p.repetition_penalty = repetition_penalty.value;
    return p;
  }

  /// "temperature 0.8 (llama-server), top_k 40 (llama-server), ..." for the start-up lines.
  std::string line() const {
    return fmt::format(
        "temperature {} ({}), top_k {} ({}), top_p {} ({}), min_p {} ({}), repetition_penalty {} "
        "({})",
        temperature.value, temperature.source, top_k.value, top_k.source, top_p.value, top_p.source,
        min_p.value, min_p.source, repetition_penalty.value, repetition_penalty.source);
  }
};

}  // namespace tf::sample
