#pragma once
/// backend::cuda's cuBLASLt matmuls (cuda_matmul::cublaslt). y [M, N] = x [M, K] · Wᵀ for a
/// weight W [N, K] row-major is the column-major problem D [N x M] = op(A) · B with A = W as a
/// K x N matrix (transa = T), B = x as K x M, D = y as N x M (ld N). One algorithm is chosen per
/// weight shape when the weight is bound, at a reference M, forced to split-K 1 without a
/// reduction scheme, and that same algorithm runs every M (checked per M with
/// cublasLtMatmulAlgoCheck): an output's sum over K then follows one tile's order whatever the
/// batch, so a row's result does not depend on the rows beside it. F32 weights multiply f32
/// activations (no TF32); F16 and BF16 weights multiply activations rounded to their type;
/// quantized weights are dequantized slab by slab into f16 tiles (kernels/cuda/convert.cuh) at
/// every M. Sums are f32 (CUBLAS_COMPUTE_32F), the output f32.
#include <kernels/cuda/launch.hpp>
#include <tf/backend/cuda/device.hpp>
#include <tf/backend/cuda_matmul.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace tf::backend::cuda_parts {

/// Throws tf::error naming `what` and cuBLASLt's status where `s` is an error.
inline void check(cublasStatus_t s, char const* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw error("tf: cuBLASLt {} failed: {} ({})", what, cublasLtGetStatusString(s),
                cublasLtGetStatusName(s));
}

/// The workspace every cuBLASLt call is given (the limit its algorithms are chosen under).
inline constexpr std::size_t blaslt_workspace_bytes = std::size_t{32} << 20;
/// The f16 tile a slab of a quantized weight's rows is dequantized into.
inline constexpr std::size_t blaslt_tile_bytes = std::size_t{32} << 20;
/// The batch size an algorithm is chosen at (a prefill chunk's order of size).
inline constexpr std::int64_t blaslt_reference_rows = 512;
/// A slab's rows are a multiple of this, so every slab's first output column is 256-byte aligned.
inline constexpr std::int64_t blaslt_slab_align = 64;

/// Device bytes the backend allocates at start for its matmuls, which the memory budget counts
/// beside the weights: none for the own kernel; the workspace and the tile for cuBLASLt.
inline constexpr std::uint64_t blaslt_scratch_bytes(cuda_matmul m) {
  return m == cuda_matmul::cublaslt ? blaslt_workspace_bytes + blaslt_tile_bytes : 0;
}

/// The SUMMARY line's words for the matmul path.
inline std::string matmul_summary(cuda_matmul m) {
  if (m == cuda_matmul::cublaslt)
    return fmt::format(
        "matmul: cuBLASLt at every batch size, one algorithm per weight shape chosen at {} rows "
        "with split-K 1 and no reduction, f32 sums (F32 weights over f32 activations, F16/BF16 "
        "over activations rounded to the weight's type, quantized weights as dequantized f16 "
        "tiles); {} MiB workspace + {} MiB tile",
        blaslt_reference_rows, blaslt_workspace_bytes >> 20, blaslt_tile_bytes >> 20);
  return "matmul: one warp per output, 32-element dequantized chunks in a fixed lane order (F32 "
         "F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q8_K)";
}

namespace blaslt_detail {

struct deleter {
  void operator()(cublasLtMatmulDescOpaque_t* p) const { cublasLtMatmulDescDestroy(p); }
  void operator()(cublasLtMatrixLayoutOpaque_t* p) const { cublasLtMatrixLayoutDestroy(p); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, deleter>;
using layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, deleter>;
using preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, deleter>;

/// A column-major rows x cols matrix of `type`, columns `ld` elements apart.
inline layout make_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                          std::int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check(cublasLtMatrixLayoutCreate(&l, type, static_cast<std::uint64_t>(rows),
                                   static_cast<std::uint64_t>(cols), ld),
        "cublasLtMatrixLayoutCreate");
  layout owned(l);
  cublasLtOrder_t const order = CUBLASLT_ORDER_COL;
  check(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order)),
        "cublasLtMatrixLayoutSetAttribute");
  return owned;
}

/// The largest power of two (at most 256) dividing `bytes`.
inline std::uint32_t alignment(std::uint64_t bytes) {
  std::uint32_t a = 256;
  while (a > 1 && bytes % a != 0) a /= 2;
  return a;
}

template <class T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, T v) {
  check(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)),
        "cublasLtMatmulPreferenceSetAttribute");
}

}  // namespace blaslt_detail

/// One weight shape's cuBLASLt setup: its operand types, how its rows are cut into slabs, and per
/// slab shape the A layout and the one algorithm every M runs; per M, the B and D layouts that
/// have passed cublasLtMatmulAlgoCheck.
struct blaslt_plan {
  struct slab_shape {
    std::int64_t rows = 0;
    blaslt_detail::layout a;
    cublasLtMatmulAlgo_t algo{};
  };
  struct at_rows {
    blaslt_detail::layout b;
    std::vector<blaslt_detail::layout> d;  // one per slab shape
  };

  model::tensor_type type{};
  std::int64_t rows = 0, cols = 0;
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F;
  bool tiles = false;    // dequantized slab by slab into the tile
  bool round_x = false;  // activations rounded to b_type first
  kernels::cuda::half_kind kind = kernels::cuda::half_kind::f16;
  std::int64_t slab_rows = 0;  // rows per slab: all of them without tiles
  blaslt_detail::desc op;
  std::vector<slab_shape> shapes;  // [0] a whole slab, [1] a shorter last slab if any
  std::map<std::int64_t, at_rows> checked;

  std::string name() const {
    return fmt::format("{} weight of {} x {}", model::traits_of(type).name, rows, cols);
  }
  slab_shape const& shape_of(std::int64_t slab) const { return shapes[slab == slab_rows ? 0 : 1]; }
};

/// The cuBLASLt context of one backend: its handle, the workspace and the dequantization tile
/// (blaslt_scratch_bytes, allocated once at start), the rounded activations, and one plan per
/// weight shape (bound weights of one shape, e.g. a layer's experts, share it).
class blaslt {
 public:
  blaslt() : workspace_(blaslt_workspace_bytes), tile_(blaslt_tile_bytes / 2) {
    cublasLtHandle_t h = nullptr;
    check(cublasLtCreate(&h), "cublasLtCreate");
    handle_.reset(h, [](cublasLtHandle_t p) { cublasLtDestroy(p); });
  }

  void const* workspace() const { return workspace_.data(); }
  std::size_t workspace_size() const { return blaslt_workspace_bytes; }
  void const* tile() const { return tile_.data(); }

  /// The plan for w's shape: made, and its algorithms chosen, the first time the shape is bound;
  /// null for an empty weight (the own kernel writes its zeros).
  std::shared_ptr<blaslt_plan> plan(kernels::cuda::weight const& w) {
    if (w.rows == 0 || w.cols == 0) return nullptr;
    auto const key = std::make_tuple(w.type, w.rows, w.cols, w.row_bytes);
    auto& p = plans_[key];
    if (!p) p = make_plan(w);
    return p;
  }

  /// y [n, w.rows] = x [n, w.cols] · wᵀ through plan p (made for w's shape).
  void run(blaslt_plan& p, kernels::cuda::weight const& w, float const* x, float* y, std::int64_t n,
           kernels::cuda::stream_t s) {
    if (n == 0 || p.rows == 0) return;
    auto const& m = rows_checked(p, n);
    void const* b = x;
    if (p.round_x) {
      x16_.resize(static_cast<std::size_t>(n * p.cols));
      kernels::cuda::round_rows(x, x16_.data(), n * p.cols, p.kind, s);
      b = x16_.data();
    }
    float const alpha = 1.0f, beta = 0.0f;
    for (std::int64_t first = 0; first < p.rows; first += p.slab_rows) {
      std::int64_t const count = std::min(p.slab_rows, p.rows - first);
      auto const& shape = p.shape_of(count);
      void const* a = w.data;
      if (p.tiles) {
        kernels::cuda::dequantize_rows(w, first, count, p.kind, tile_.data(), s);
        a = tile_.data();
      }
      auto* d = y + first;
      auto* dl = m.d[&shape == &p.shapes[0] ? 0 : 1].get();
      check(cublasLtMatmul(handle_.get(), p.op.get(), &alpha, a, shape.a.get(), b, m.b.get(), &beta,
                           d, dl, d, dl, &shape.algo, workspace_.data(), blaslt_workspace_bytes, s),
            "cublasLtMatmul");
    }
  }

 private:
  std::shared_ptr<blaslt_plan> make_plan(kernels::cuda::weight const& w) {
    auto p = std::make_shared<blaslt_plan>();
    p->type = static_cast<model::tensor_type>(w.type);
    p->rows = w.rows;
    p->cols = w.cols;
    if (p->type == model::tensor_type::f32) {
      p->a_type = p->b_type = CUDA_R_32F;
    } else if (p->type == model::tensor_type::f16) {
      p->a_type = p->b_type = CUDA_R_16F;
      p->round_x = true;
    } else if (p->type == model::tensor_type::bf16) {
      p->a_type = p->b_type = CUDA_R_16BF;
      p->kind = kernels::cuda::half_kind::bf16;
      p->round_x = true;
    } else {  // quantized: f16 tiles (docs/kernel-contract.md says why f16), f16 activations
      p->a_type = p->b_type = CUDA_R_16F;
      p->tiles = p->round_x = true;
    }
    std::uint64_t const a_elem = p->a_type == CUDA_R_32F ? 4 : 2;
    if (!p->tiles && w.row_bytes != static_cast<std::uint64_t>(w.cols) * a_elem)
      throw error("tf: cuBLASLt reads packed rows; the {} has rows of {} bytes", p->name(),
                  w.row_bytes);
    p->slab_rows = w.rows;
    if (p->tiles) {
      auto const fit = static_cast<std::int64_t>(blaslt_tile_bytes / 2) / w.cols;
      if (fit < blaslt_slab_align)
        throw error("tf: the {} has rows too long for the {} MiB cuBLASLt tile ({} rows needed)",
                    p->name(), blaslt_tile_bytes >> 20, blaslt_slab_align);
      if (w.rows > fit) p->slab_rows = fit / blaslt_slab_align * blaslt_slab_align;
    }
    cublasLtMatmulDesc_t op = nullptr;
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "cublasLtMatmulDescCreate");
    p->op.reset(op);
    cublasOperation_t const ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
          "cublasLtMatmulDescSetAttribute");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
          "cublasLtMatmulDescSetAttribute");
    std::int64_t const last = w.rows % p->slab_rows;
    for (std::int64_t slab : {p->slab_rows, last}) {
      if (slab == 0) continue;
      auto& shape = p->shapes.emplace_back();
      shape.rows = slab;
      shape.a = blaslt_detail::make_layout(p->a_type, w.cols, slab, w.cols);
      shape.algo = choose(*p, shape);
    }
    return p;
  }

  // The first heuristic candidate that still passes cublasLtMatmulAlgoCheck with split-K forced
  // to 1 and no reduction, preferring one that needs no workspace (no partial sums shared between
  // blocks); the same algorithm then serves every M. The preference's reduction mask is left
  // open: the candidates are forced instead, so a split-K favourite still gives its tile.
  cublasLtMatmulAlgo_t choose(blaslt_plan const& p, blaslt_plan::slab_shape const& shape) {
    namespace d = blaslt_detail;
    auto const b = d::make_layout(p.b_type, p.cols, blaslt_reference_rows, p.cols);
    auto const out = d::make_layout(CUDA_R_32F, shape.rows, blaslt_reference_rows, p.rows);
    cublasLtMatmulPreference_t pr = nullptr;
    check(cublasLtMatmulPreferenceCreate(&pr), "cublasLtMatmulPreferenceCreate");
    d::preference const owned(pr);
    std::uint64_t const elem = p.b_type == CUDA_R_32F ? 4 : 2;
    d::set_pref(pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                static_cast<std::uint64_t>(blaslt_workspace_bytes));
    // Device arrays start 256-byte aligned; rows and slabs move the operands by these steps.
    d::set_pref(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                d::alignment(static_cast<std::uint64_t>(p.cols) * elem));
    d::set_pref(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                d::alignment(static_cast<std::uint64_t>(p.cols) * elem));
    std::uint32_t const c_align =
        std::min(d::alignment(static_cast<std::uint64_t>(p.rows) * 4),
                 d::alignment(static_cast<std::uint64_t>(p.slab_rows) * 4));
    d::set_pref(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, c_align);
    d::set_pref(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, c_align);
    std::array<cublasLtMatmulHeuristicResult_t, 8> found{};
    int count = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle_.get(), p.op.get(), shape.a.get(), b.get(),
                                         out.get(), out.get(), pr, static_cast<int>(found.size()),
                                         found.data(), &count),
          "cublasLtMatmulAlgoGetHeuristic");
    bool have = false;
    cublasLtMatmulAlgo_t fallback{};
    for (int i = 0; i < count; ++i) {
      if (found[static_cast<std::size_t>(i)].state != CUBLAS_STATUS_SUCCESS) continue;
      cublasLtMatmulAlgo_t algo = found[static_cast<std::size_t>(i)].algo;
      std::int32_t const splits = 1;
      auto const none = static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE);
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                               sizeof(splits)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none,
                                               sizeof(none)) != CUBLAS_STATUS_SUCCESS)
        continue;
      cublasLtMatmulHeuristicResult_t r{};
      if (cublasLtMatmulAlgoCheck(handle_.get(), p.op.get(), shape.a.get(), b.get(), out.get(),
                                  out.get(), &algo, &r) != CUBLAS_STATUS_SUCCESS ||
          r.workspaceSize > blaslt_workspace_bytes)
        continue;
      if (r.workspaceSize == 0) return algo;
      if (!have) fallback = algo;
      have = true;
    }
    if (!have)
      throw error(
          "tf: cuBLASLt offers no algorithm with split-K 1 and no reduction for the {} ({} of {} "
          "candidates at {} rows)",
          p.name(), count, found.size(), blaslt_reference_rows);
    return fallback;
  }

  // The B and D layouts at n rows, each slab shape's algorithm checked for them once.
  blaslt_plan::at_rows const& rows_checked(blaslt_plan& p, std::int64_t n) {
    auto it = p.checked.find(n);
    if (it != p.checked.end()) return it->second;
    namespace d = blaslt_detail;
    blaslt_plan::at_rows m;
    m.b = d::make_layout(p.b_type, p.cols, n, p.cols);
    for (auto const& shape : p.shapes) {
      auto out = d::make_layout(CUDA_R_32F, shape.rows, n, p.rows);
      cublasLtMatmulHeuristicResult_t r{};
      cublasStatus_t const s =
          cublasLtMatmulAlgoCheck(handle_.get(), p.op.get(), shape.a.get(), m.b.get(), out.get(),
                                  out.get(), &shape.algo, &r);
      if (s != CUBLAS_STATUS_SUCCESS || r.workspaceSize > blaslt_workspace_bytes)
        throw error(
            "tf: cuBLASLt cannot run the algorithm chosen for the {} (slabs of {} rows) at {} "
            "rows: {} ({}), workspace {} of {} bytes",
            p.name(), shape.rows, n, cublasLtGetStatusString(s), cublasLtGetStatusName(s),
            r.workspaceSize, blaslt_workspace_bytes);
      m.d.push_back(std::move(out));
    }
    return p.checked.emplace(n, std::move(m)).first->second;
  }

  std::shared_ptr<cublasLtContext> handle_;
  device_array<std::byte> workspace_;
  device_array<std::uint16_t> tile_;
  device_array<std::uint16_t> x16_;  // activations rounded to the weight's 16-bit type
  std::map<std::tuple<std::uint32_t, std::int64_t, std::int64_t, std::uint64_t>,
           std::shared_ptr<blaslt_plan>>
      plans_;
};

}  // namespace tf::backend::cuda_parts
