#pragma once
/// Host definitions of the conversion launchers of kernels/cuda/convert.cuh (round_rows,
/// dequantize_rows), through the same convert_math.hpp expressions the kernels run; included by
/// host_launchers.hpp, whose checks they share.
#include <kernels/cuda/convert_math.hpp>
#include <kernels/cuda/launch.hpp>
#include <tests/cuda_host/host_launchers.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {

void round_rows(float const* src, std::uint16_t* dst, std::int64_t n, half_kind kind, stream_t) {
  if (n < 0) throw std::runtime_error("tf::kernels::cuda::round_rows: negative element count");
  host_detail::on_device_n(src, n, "round_rows", "src");
  host_detail::on_device_n(dst, n, "round_rows", "dst");
  for (std::int64_t i = 0; i < n; ++i) dst[i] = round_to_half(src[i], kind);
}

void dequantize_rows(weight const& w, std::int64_t first, std::int64_t count, half_kind kind,
                     std::uint16_t* dst, stream_t) {
  host_detail::check_weight(w, "dequantize_rows");
  if (first < 0 || count < 0 || first + count > w.rows)
    throw std::runtime_error("tf::kernels::cuda::dequantize_rows: rows [" + std::to_string(first) +
                             ", " + std::to_string(first + count) + ") of a weight of " +
                             std::to_string(w.rows) + " rows");
  host_detail::on_device_n(dst, count * w.cols, "dequantize_rows", "dst");
  auto const* data = static_cast<std::uint8_t const*>(w.data);
  for (std::int64_t r = 0; r < count; ++r)
    for (std::int64_t c = 0; c < chunk_count(w.cols); ++c)
      dequant_chunk_half(w.type, data + (first + r) * static_cast<std::int64_t>(w.row_bytes), c,
                         chunk_length(w.cols, c), kind, dst + r * w.cols + c * chunk_elems);
}

}  // namespace tf::kernels::cuda
