#pragma once
/// An optional backend capability: sampling the logit rows a forward left in device memory
/// (`be.logits(..., nullptr)`), so only tokens and logprobs cross to the host. backend::cuda has
/// it; backend::cpu writes its logits into host memory and leaves sampling to tf::sample::sampler.
#include <kernels/portable/sample_math.hpp>

#include <span>

namespace tf::backend {

/// B samples on the device: `be.sample_rows(params, adjustments, results)` over the logit rows of
/// its last forward, in kernels/portable/sample_math.hpp's order.
template <class B>
concept device_sampling =
    requires(B& be, std::span<kernels::portable::sample_math::row_params const> rows,
             std::span<kernels::portable::sample_math::logit_adjust const> adjust,
             std::span<kernels::portable::sample_math::row_result> out) {
  be.sample_rows(rows, adjust, out);
};

}  // namespace tf::backend
