#pragma once
/// The rows8 layout of a Q8_0 matrix: rows in groups of eight, each group's block i stored as one
/// block_q8_0x8, so the one-row matvec reads the matrix as a single sequential run. The bytes are
/// those of the row-major matrix, moved; every kernel result is the same bit for bit.
#include <kernels/cpu/quant_blocks.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tf::kernels::cpu {

/// Row order of a weight matrix in memory.
enum class weight_layout { rows, rows8 };

/// Whether a [rows, cols] matrix of type `t` can be regrouped into rows8.
inline bool rows8_fits(tf::model::tensor_type t, std::int64_t rows, std::int64_t cols) {
  return t == tf::model::tensor_type::q8_0 && rows > 0 && rows % 8 == 0 && cols > 0 &&
         cols % qk32 == 0;
}

/// Regroups a row-major [rows, cols] Q8_0 matrix at `data` into rows8, in place.
inline void regroup_rows8(std::byte* data, std::int64_t rows, std::int64_t cols) {
  if (!rows8_fits(tf::model::tensor_type::q8_0, rows, cols))
    throw tf::error("tf::kernels::cpu::regroup_rows8: a [{}, {}] Q8_0 matrix has no rows8 layout",
                    rows, cols);
  std::int64_t const nb = cols / qk32;
  std::vector<block_q8_0> stripe(static_cast<std::size_t>(8 * nb));
  for (std::int64_t g = 0; g < rows / 8; ++g) {
    auto* dst = reinterpret_cast<block_q8_0x8*>(data) + g * nb;
    std::memcpy(stripe.data(), dst, stripe.size() * sizeof(block_q8_0));
    for (std::int64_t j = 0; j < 8; ++j)
      for (std::int64_t i = 0; i < nb; ++i) {
        block_q8_0 const& b = stripe[static_cast<std::size_t>(j * nb + i)];
        dst[i].d[j] = b.d;
        std::memcpy(dst[i].qs[j], b.qs, qk32);
      }
  }
}

/// Rows [8 * g0, 8 * g1) of a rows8 matrix with nb blocks per row, row-major into `out`.
inline void rows8_to_rows(block_q8_0x8 const* w, std::int64_t nb, std::int64_t g0, std::int64_t g1,
                          block_q8_0* out) {
  for (std::int64_t g = g0; g < g1; ++g)
    for (std::int64_t j = 0; j < 8; ++j)
      for (std::int64_t i = 0; i < nb; ++i) {
        block_q8_0x8 const& s = w[g * nb + i];
        block_q8_0& b = *out++;
        b.d = s.d[j];
        std::memcpy(b.qs, s.qs[j], qk32);
      }
}

/// Row r of a rows8 matrix with nb blocks per row, as Q8_0 blocks into `out` [nb].
inline void rows8_row(block_q8_0x8 const* w, std::int64_t nb, std::int64_t r, block_q8_0* out) {
  block_q8_0x8 const* g = w + (r / 8) * nb;
  std::int64_t const j = r % 8;
  for (std::int64_t i = 0; i < nb; ++i) {
    out[i].d = g[i].d[j];
    std::memcpy(out[i].qs, g[i].qs[j], qk32);
  }
}

}  // namespace tf::kernels::cpu
