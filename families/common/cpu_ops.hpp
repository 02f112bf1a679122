#pragma once
/// CPU ops shared by the family forwards: the quantized matmul, and scalar RMSNorm, NeoX RoPE and
/// GeGLU. Each output element is summed in one fixed order, so results do not depend on the batch
/// or the thread count.
#include <kernels/cpu/dequant.hpp>
#include <kernels/cpu/matmul.hpp>
#include <kernels/cpu/rows8.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <kernels/cpu/vec_math.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>
#include <tf/model/tensor_view.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

namespace tf::families::cpu_ops {

/// A weight matrix: `rows` rows of `cols` elements of `type`, row-major as in the file or, for a
/// Q8_0 matrix the loader regrouped, in the rows8 layout.
struct matrix {
  model::tensor_type type{};
  std::int64_t rows = 0;  // output features
  std::int64_t cols = 0;  // input features (the row length)
  std::byte const* data = nullptr;
  std::uint64_t row_bytes = 0;
  kernels::cpu::weight_layout layout = kernels::cpu::weight_layout::rows;

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

using kernels::cpu::thread_pool;

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
inline void matmul(thread_pool& pool, matrix const& w, float const* x, float* y,
                   std::int64_t n_tok) {
  kernels::cpu::matmul(matmul_params_of(w, x, y, n_tok), pool);
}

/// y_i = x w_i^T for matrices that read the same input x [n_tok, cols], in one pass over the pool
/// when n_tok is 1 (each y_i as matmul gives it).
inline void matmul_group(thread_pool& pool,
                         std::initializer_list<std::pair<matrix const&, float*>> ws, float const* x,
                         std::int64_t n_tok) {
  std::array<kernels::cpu::matmul_params, 4> ps{};
  std::size_t n = 0;
  for (auto const& [w, y] : ws) {
    if (n == ps.size()) throw error("tf: matmul_group takes at most {} matrices", ps.size());
    ps[n++] = matmul_params_of(w, x, y, n_tok);
  }
  kernels::cpu::matvec_group(std::span(ps.data(), n), pool);
}

/// out = x * rsqrt(mean(x^2) + eps) * w over n elements (w already holds any +1 shift). The mean
/// is rounded to f32 and the scale taken in f32, as llama.cpp's CPU path does.
inline void rmsnorm(float const* x, float const* w, float* out, std::int64_t n, float eps) {
  double const ss = kernels::cpu::vec_math::sum_squares(x, n);
  float const mean = static_cast<float>(ss / static_cast<double>(n));
  float const inv = 1.0f / std::sqrt(mean + eps);
  for (std::int64_t i = 0; i < n; ++i) out[i] = (x[i] * inv) * w[i];
}

/// cos (c [dim/2]) and sin (s [dim/2]) of NeoX RoPE's angles freq_scale * pos * theta^(-2i / dim),
/// in f32 with each frequency the previous one times theta^(-2 / dim), as llama.cpp's CPU path
/// computes them (its cosines and sines, bit for bit).
inline void rope_neox_angles(double pos, double theta, std::int64_t dim, float* c, float* s,
                             float freq_scale = 1.0f) {
  std::int64_t const half = dim / 2;
  float const step = std::pow(static_cast<float>(theta), -2.0f / static_cast<float>(dim));
  float a = static_cast<float>(pos);
  for (std::int64_t i = 0; i < half; ++i) {
    float const t = freq_scale * a;
    c[i] = std::cos(t);
    s[i] = std::sin(t);
    a *= step;
  }
}

/// NeoX RoPE in place on one head of `dim` floats, pairs (i, i + dim/2), by precomputed angles.
inline void rope_neox_apply(float* x, std::int64_t dim, float const* c, float const* s) {
  kernels::cpu::vec_math::rope_rotate(x, dim / 2, c, s);
}

/// NeoX RoPE in place on one head of `dim` floats: pairs (i, i + dim/2).
inline void rope_neox(float* x, std::int64_t dim, double pos, double theta) {
  thread_local std::vector<float> cs;
  cs.resize(static_cast<std::size_t>(dim));
  rope_neox_angles(pos, theta, dim, cs.data(), cs.data() + dim / 2);
  rope_neox_apply(x, dim, cs.data(), cs.data() + dim / 2);
}

/// gelu with the tanh approximation (PyTorch's "gelu_pytorch_tanh"), its f32 steps as llama.cpp's
/// compiled CPU code rounds them (1 + 0.044715 x^2 in one fma).
inline float gelu_tanh(float x) {
  constexpr float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * x * std::fma(0.044715f * x, x, 1.0f)));
}

}  // namespace tf::families::cpu_ops
