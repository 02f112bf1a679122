#pragma once
/// Host definitions of the sampling launchers (kernels/cuda/sample.cuh) for the emulated backend:
/// each row through portable::sample_math::sample_row_reference, the kernels' order on the host,
/// with std::sort in place of CUB's radix sort (the rank keys are distinct, so any correct sort
/// gives the same order). Every buffer the kernels would touch is checked to be device memory of
/// the size they need. Included by host_launchers.hpp.
#include <kernels/cuda/launch.hpp>
#include <kernels/portable/sample_math.hpp>
#include <tests/cuda_host/fake_cuda_runtime.hpp>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {

namespace host_detail {

inline void sample_on_device(void const* p, std::int64_t bytes, char const* what) {
  if (bytes > 0 && !fake_cuda::on_device(p, static_cast<std::size_t>(bytes)))
    throw std::runtime_error(std::string("tf::kernels::cuda::sample: ") + what + " (" +
                             std::to_string(bytes) + " bytes) is not inside a device allocation");
}

inline void sample_check(std::int64_t rows, std::int64_t vocab) {
  if (rows < 0 || vocab <= 0 || rows * vocab > INT_MAX)
    throw std::invalid_argument("tf: CUDA sample of " + std::to_string(rows) + " rows of " +
                                std::to_string(vocab) + " logits");
}

}  // namespace host_detail

std::size_t sample_sort_bytes(std::int64_t rows, std::int64_t vocab) {
  host_detail::sample_check(rows, vocab);
  return 256;  // a stand-in for CUB's temporary storage, so the caller's allocation is exercised
}

void sample(float const* logits, std::int64_t rows, std::int64_t vocab,
            portable::sample_math::row_params const* host_params,
            portable::sample_math::row_params const* params,
            portable::sample_math::logit_adjust const* adjust, sample_scratch const& scratch,
            portable::sample_math::row_result* out, stream_t) {
  namespace sm = portable::sample_math;
  using host_detail::sample_on_device;
  host_detail::sample_check(rows, vocab);
  if (rows == 0) return;
  auto const n = rows * vocab;
  sample_on_device(logits, n * 4, "the logits");
  sample_on_device(params, rows * static_cast<std::int64_t>(sizeof(sm::row_params)), "params");
  sample_on_device(out, rows * static_cast<std::int64_t>(sizeof(sm::row_result)), "out");
  sample_on_device(scratch.segments, 2 * rows * 4, "segments");
  sample_on_device(scratch.state, rows * static_cast<std::int64_t>(sizeof(sm::row_state)), "state");
  bool cut = false, adjusted = false;
  for (std::int64_t r = 0; r < rows; ++r) {
    auto const& p = host_params[r];
    if (p.top_logprobs < 0 || p.top_logprobs > sm::max_top_logprobs)
      throw std::invalid_argument("tf: CUDA sample asks for " + std::to_string(p.top_logprobs) +
                                  " top logprobs");
    cut = cut || (p.temperature != 0.0f && sm::has_cut(p.top_k, p.top_p, p.min_p, vocab));
    adjusted = adjusted || p.adjust_count > 0;
  }
  if ((adjusted && !scratch.work) ||
      (cut && (!scratch.keys || !scratch.sorted || !scratch.sort_temp)))
    throw std::invalid_argument("tf: CUDA sample without the scratch its rows need");
  if (adjusted) sample_on_device(scratch.work, n * 4, "work");
  if (cut) {
    sample_on_device(scratch.keys, n * 8, "keys");
    sample_on_device(scratch.sorted, n * 8, "sorted");
    sample_on_device(scratch.sort_temp, static_cast<std::int64_t>(scratch.sort_bytes), "sort_temp");
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    auto const& p = params[r];  // the device copy: checks the upload, not just the host array
    if (p.adjust_count > 0)
      sample_on_device(adjust + p.adjust_begin,
                       p.adjust_count * static_cast<std::int64_t>(sizeof(sm::logit_adjust)),
                       "the adjustments");
    for (std::int32_t i = 0; i < p.adjust_count; ++i) {
      auto const& a = adjust[p.adjust_begin + i];
      if (a.token < 0 || a.token >= vocab)
        throw std::runtime_error("tf::kernels::cuda::sample: an adjustment names token " +
                                 std::to_string(a.token));
      // The kernel applies the leading penalties in parallel: they must be penalties, on
      // distinct tokens.
      bool const penalty = i < p.penalty_count;
      if (penalty != (a.count > 0))
        throw std::runtime_error("tf::kernels::cuda::sample: adjustment " + std::to_string(i) +
                                 " is on the wrong side of penalty_count");
      for (std::int32_t j = 0; penalty && j < i; ++j)
        if (adjust[p.adjust_begin + j].token == a.token)
          throw std::runtime_error("tf::kernels::cuda::sample: two penalties on token " +
                                   std::to_string(a.token));
    }
    out[r] = sm::sample_row_reference(logits + r * vocab, vocab, p,
                                      p.adjust_count > 0 ? adjust + p.adjust_begin : nullptr);
  }
}

}  // namespace tf::kernels::cuda
