#pragma once
/// The CPU backend's weights: a matrix in host memory (the file's mapping or its copy), row-major
/// as in the file or, for a Q8_0 head the loader regrouped, in the rows8 layout; and the quantized
/// matmul over it. Each output element is summed in one fixed order, so results do not depend on
/// the batch or the thread count.
#include <kernels/cpu/dequant.hpp>
#include <kernels/cpu/matmul.hpp>
#include <kernels/cpu/rows8.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <tf/backend/host_matrix.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>
#include <tf/model/tensor_view.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

namespace tf::backend::cpu_parts {

/// A weight matrix as the CPU backend reads it: a host matrix (the file's mapping or a copy), in
/// the file's row order or regrouped.
struct matrix : host_matrix {
  kernels::cpu::weight_layout layout = kernels::cpu::weight_layout::rows;
  /// A rank's rows of a head split by vocabulary over `vocab` rows in all: the backend gathers
  /// every rank's logits (0: the whole head).
  std::int64_t vocab = 0;

  matrix() = default;
  /// A file's matrix, read in place in its row order.
  matrix(host_matrix m)
      : host_matrix(m) {}  // NOLINT(google-explicit-constructor): binders pass files' matrices

  /// Row r dequantized to f32 into out [cols].
  void dequantize_row(std::int64_t r, float* out) const {
    if (layout == kernels::cpu::weight_layout::rows8) {
      thread_local std::vector<kernels::cpu::block_q8_0> row;
      row.resize(static_cast<std::size_t>(cols / kernels::cpu::qk32));
      kernels::cpu::rows8_row(reinterpret_cast<kernels::cpu::block_q8_0x8 const*>(data),
                              cols / kernels::cpu::qk32, r, row.data());
      return kernels::cpu::dequantize_row(type, row.data(), out, cols);
    }
    kernels::cpu::dequantize_row(type, data + static_cast<std::uint64_t>(r) * row_bytes, out, cols);
  }
};

/// m in the rows8 layout, regrouped in `file`'s own memory (the one-row matvec then reads it as
/// one sequential run), when m is a Q8_0 matrix of whole eight-row groups, the file was read into
/// memory and the kernels' path is AVX-512 VNNI (the others would read it back into row order);
/// m as it is otherwise. `t` is m's tensor in `file`.
template <class File>
matrix in_rows8(File const& file, model::tensor_view const& t, matrix m) {
  if constexpr (requires { file.rewrite_tensor(t, "rows8", [](std::byte*) {}); }) {
    // Only a whole tensor: a slab of one (an expert) keeps the file's row order.
    if (kernels::cpu::default_isa() == kernels::cpu::isa::avx512 &&
        kernels::cpu::rows8_fits(m.type, m.rows, m.cols) && m.data == t.data &&
        m.row_bytes * static_cast<std::uint64_t>(m.rows) == t.bytes &&
        file.rewrite_tensor(t, "rows8",
                            [&](std::byte* p) { kernels::cpu::regroup_rows8(p, m.rows, m.cols); }))
      m.layout = kernels::cpu::weight_layout::rows8;
  }
  return m;
}

/// The kernel's parameters for y = x w^T over n_tok rows of x.
inline kernels::cpu::matmul_params matmul_params_of(matrix const& w, float const* x, float* y,
                                                    std::int64_t n_tok) {
  kernels::cpu::matmul_params p;
  p.w_type = w.type;
  p.w = w.data;
  p.x = x;
  p.y = y;
  p.n = w.rows;
  p.k = w.cols;
  p.b = n_tok;
  p.layout = w.layout;
  return p;
}

/// y[t, r] = sum_c W[r, c] * x[t, c] for t < n_tok; x is [n_tok, cols], y is [n_tok, rows].
inline void matmul(kernels::cpu::thread_pool& pool, matrix const& w, float const* x, float* y,
                   std::int64_t n_tok) {
  kernels::cpu::matmul(matmul_params_of(w, x, y, n_tok), pool);
}

/// y_i = x w_i^T for up to four matrices that read the same x [n_tok, cols], in one pass over the
/// pool when n_tok is 1 (each y_i as matmul gives it).
inline void matmul_group(kernels::cpu::thread_pool& pool,
                         std::span<std::pair<matrix const*, float*> const> ws, float const* x,
                         std::int64_t n_tok) {
  std::array<kernels::cpu::matmul_params, 4> ps{};
  if (ws.size() > ps.size()) throw error("tf: matmul_group takes at most {} matrices", ps.size());
  for (std::size_t i = 0; i < ws.size(); ++i)
    ps[i] = matmul_params_of(*ws[i].first, x, ws[i].second, n_tok);
  kernels::cpu::matvec_group(std::span(ps.data(), ws.size()), pool);
}

}  // namespace tf::backend::cpu_parts
