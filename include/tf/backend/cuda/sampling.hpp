#pragma once
/// backend::cuda's device sampling: the rows' params and adjustments uploaded, the scratch the
/// kernels need (kernels/cuda/sample.cuh) grown on demand, and the results copied back, so a
/// token costs a few bytes over the bus instead of its logits row.
#include <kernels/cuda/launch.hpp>
#include <kernels/portable/sample_math.hpp>
#include <tf/backend/cuda/device.hpp>
#include <tf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace tf::backend::cuda_parts {

/// Samples logit rows left in device memory; owns the device scratch between calls.
class device_sampler {
 public:
  using row_params = kernels::portable::sample_math::row_params;
  using logit_adjust = kernels::portable::sample_math::logit_adjust;
  using row_result = kernels::portable::sample_math::row_result;

  /// out[r] = the sample of row r of logits [rows, vocab] (device memory) under params[r]; throws
  /// tf::error where a row has no finite logit or every logit is -inf after its adjustments.
  void run(float const* logits, std::int64_t rows, std::int64_t vocab,
           std::span<row_params const> params, std::span<logit_adjust const> adjust,
           std::span<row_result> out, kernels::cuda::stream_t stream) {
    namespace sm = kernels::portable::sample_math;
    if (static_cast<std::int64_t>(params.size()) != rows || out.size() != params.size())
      throw error("tf: device sampling of {} logit rows got {} params and {} results", rows,
                  params.size(), out.size());
    if (rows == 0) return;
    bool cut = false, adjusted = false;
    for (auto const& p : params) {
      cut = cut || (p.temperature != 0.0f && sm::has_cut(p.top_k, p.top_p, p.min_p, vocab));
      adjusted = adjusted || p.adjust_count > 0;
      if (p.adjust_begin < 0 || p.adjust_count < 0 || p.penalty_count < 0 ||
          p.penalty_count > p.adjust_count ||
          static_cast<std::size_t>(p.adjust_begin) + static_cast<std::size_t>(p.adjust_count) >
              adjust.size())
        throw error("tf: a device sampling row names adjustments [{}, +{}) of {}", p.adjust_begin,
                    p.adjust_count, adjust.size());
    }
    auto const n = static_cast<std::size_t>(rows * vocab);
    params_.upload(params.data(), params.size());
    if (!adjust.empty()) adjust_.upload(adjust.data(), adjust.size());
    segments_.resize(static_cast<std::size_t>(2 * rows));
    state_.resize(static_cast<std::size_t>(rows));
    out_.resize(static_cast<std::size_t>(rows));
    kernels::cuda::sample_scratch scratch;
    scratch.segments = segments_.data();
    scratch.state = state_.data();
    if (adjusted) {
      work_.resize(n);
      scratch.work = work_.data();
    }
    if (cut) {
      keys_.resize(n);
      sorted_.resize(n);
      temp_.resize(kernels::cuda::sample_sort_bytes(rows, vocab));
      scratch.keys = keys_.data();
      scratch.sorted = sorted_.data();
      scratch.sort_temp = temp_.data();
      scratch.sort_bytes = temp_.size();
    }
    kernels::cuda::sample(logits, rows, vocab, params.data(), params_.data(),
                          adjust.empty() ? nullptr : adjust_.data(), scratch, out_.data(), stream);
    check(cudaMemcpy(out.data(), out_.data(), out.size() * sizeof(row_result),
                     cudaMemcpyDeviceToHost),
          "sampled tokens copy to the host");
    for (std::size_t r = 0; r < out.size(); ++r) {
      if (out[r].status == sm::no_finite_logit)
        throw error("tf: sample() got no finite logit (device row {})", r);
      if (out[r].status == sm::all_masked)
        throw error("tf: every logit is -inf after the penalties (device row {})", r);
    }
  }

 private:
  device_array<row_params> params_;
  device_array<logit_adjust> adjust_;
  device_array<float> work_;
  device_array<std::uint64_t> keys_, sorted_;
  device_array<std::int32_t> segments_;
  device_array<kernels::portable::sample_math::row_state> state_;
  device_array<std::byte> temp_;
  device_array<row_result> out_;
};

}  // namespace tf::backend::cuda_parts
