#pragma once
/// The cuBLASLt calls backend::cuda makes (include/tf/backend/cuda/blaslt.hpp), defined over the
/// fake device of fake_cuda_runtime.hpp, so that the backend's cuBLASLt path runs in a test binary
/// that links no libcublasLt. Descriptors are read as cuBLASLt defines them: each matrix's type,
/// rows, cols, ld and order; transa/transb; compute and scale types; host alpha and beta; every
/// attribute's size. A matmul checks its operands against its layouts and the fake device's
/// allocations (the workspace too, against what the algorithm needs), then computes D = alpha
/// op(A) op(B) + beta C with each output's sum in k order (fma from 0). The heuristic offers
/// three algorithms (a split-K one with a reduction, one that needs workspace, one that needs
/// none) filtered by the preference's limits; every matmul's algorithm is recorded, and a test
/// can make the next call of a kind fail. Include this file in exactly one translation unit
/// (host_launchers.hpp does): it defines cuBLASLt's extern "C" functions.
#include <kernels/cuda/quant.hpp>
#include <tests/cuda_host/fake_cuda_runtime.hpp>

#include <cublasLt.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <vector>

namespace fake_cublaslt {

/// An algorithm's configuration, as the fake keeps it in cublasLtMatmulAlgo_t::data.
struct algo_config {
  std::int32_t id = 0;
  std::uint32_t tile = 0;
  std::int32_t split_k = 1;
  std::uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  std::uint32_t swizzle = 0;
  std::uint32_t custom = 0;
  std::uint32_t stages = 0;
  std::uint16_t inner_shape = 0, cluster_shape = 0;
  bool operator==(algo_config const&) const = default;
};
static_assert(sizeof(algo_config) <= sizeof(cublasLtMatmulAlgo_t));

inline algo_config config_of(cublasLtMatmulAlgo_t const& a) {
  algo_config c;
  std::memcpy(&c, a.data, sizeof(c));
  return c;
}
inline void store(cublasLtMatmulAlgo_t& a, algo_config const& c) {
  std::memset(a.data, 0, sizeof(a.data));
  std::memcpy(a.data, &c, sizeof(c));
}

/// The three algorithms the heuristic knows, in the order it offers them.
inline constexpr std::int32_t split_k_algo = 7;     // split-K 4 over an in-place reduction
inline constexpr std::int32_t workspace_algo = 11;  // one pass, but needs workspace
inline constexpr std::int32_t plain_algo = 5;       // one pass, no workspace
inline constexpr std::size_t workspace_algo_bytes = std::size_t{4} << 20;

/// Workspace bytes an algorithm needs.
inline std::size_t workspace_needed(algo_config const& c) {
  if (c.split_k > 1) return std::size_t{1} << 20;
  return c.id == workspace_algo ? workspace_algo_bytes : 0;
}

/// What a test can change.
struct settings {
  cublasStatus_t fail_next_create = CUBLAS_STATUS_SUCCESS;
  cublasStatus_t fail_next_heuristic = CUBLAS_STATUS_SUCCESS;
  cublasStatus_t fail_next_matmul = CUBLAS_STATUS_SUCCESS;
  bool offer_split_k = true;   // offer split_k_algo (where the preference's mask allows it)
  bool offer_plain = true;     // offer plain_algo
  std::uint64_t reject_n = 0;  // AlgoCheck and matmul refuse problems of this n
};
inline settings& config() {
  static settings s;
  return s;
}

struct layout {
  cudaDataType_t type{};
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
  std::int32_t order = CUBLASLT_ORDER_COL;
  std::int32_t batch = 1;
};
struct op_desc {
  cublasComputeType_t compute{};
  cudaDataType_t scale{};
  std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  std::int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
};
struct preference {
  std::uint64_t max_workspace = 0;
  std::uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
  std::uint32_t align[4] = {256, 256, 256, 256};
};

/// One cublasLtMatmul as it ran.
struct call {
  algo_config algo;
  void const* a = nullptr;
  void const* b = nullptr;
  void* d = nullptr;
  std::uint64_t m = 0, n = 0, k = 0;
  cudaDataType_t a_type{}, b_type{};
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
inline std::vector<call>& calls() {
  static std::vector<call> c;
  return c;
}
/// Heuristic queries, each with the preference's workspace limit.
inline std::vector<std::uint64_t>& heuristic_limits() {
  static std::vector<std::uint64_t> h;
  return h;
}

inline std::set<void const*>& handles() {
  static std::set<void const*> h;
  return h;
}
inline std::map<void const*, layout>& layouts() {
  static std::map<void const*, layout> l;
  return l;
}
inline std::map<void const*, op_desc>& ops() {
  static std::map<void const*, op_desc> o;
  return o;
}
inline std::map<void const*, preference>& preferences() {
  static std::map<void const*, preference> p;
  return p;
}
/// Descriptors and handles not yet destroyed.
inline std::size_t live_objects() {
  return handles().size() + layouts().size() + ops().size() + preferences().size();
}

inline std::size_t elem_bytes(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;
  }
}

inline float read(cudaDataType_t t, void const* base, std::uint64_t i) {
  if (t == CUDA_R_32F) {
    float f;
    std::memcpy(&f, static_cast<char const*>(base) + 4 * i, 4);
    return f;
  }
  std::uint16_t h;
  std::memcpy(&h, static_cast<char const*>(base) + 2 * i, 2);
  return t == CUDA_R_16F ? tf::kernels::cuda::f16_to_f32(h) : tf::kernels::cuda::bf16_to_f32(h);
}

/// Bytes a column-major layout spans from its first element.
inline std::size_t span_bytes(layout const& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return ((l.cols - 1) * static_cast<std::uint64_t>(l.ld) + l.rows) * elem_bytes(l.type);
}

/// Whether the problem is one cuBLASLt takes (CUBLAS_STATUS_SUCCESS), as AlgoCheck and Matmul
/// both decide it; `m, n, k` are set from the layouts.
inline cublasStatus_t validate(void const* op_p, void const* a_p, void const* b_p, void const* c_p,
                               void const* d_p, algo_config const* algo, std::uint64_t& m,
                               std::uint64_t& n, std::uint64_t& k) {
  if (!ops().count(op_p) || !layouts().count(a_p) || !layouts().count(b_p) ||
      !layouts().count(c_p) || !layouts().count(d_p))
    return CUBLAS_STATUS_INVALID_VALUE;
  auto const& op = ops().at(op_p);
  auto const &a = layouts().at(a_p), &b = layouts().at(b_p), &c = layouts().at(c_p),
             &d = layouts().at(d_p);
  for (auto const* l : {&a, &b, &c, &d})
    if (l->order != CUBLASLT_ORDER_COL || l->batch != 1 || elem_bytes(l->type) == 0 ||
        l->ld < static_cast<std::int64_t>(l->rows))
      return CUBLAS_STATUS_NOT_SUPPORTED;
  bool const ta = op.transa == CUBLAS_OP_T, tb = op.transb == CUBLAS_OP_T;
  m = ta ? a.cols : a.rows;
  k = ta ? a.rows : a.cols;
  std::uint64_t const kb = tb ? b.cols : b.rows;
  n = tb ? b.rows : b.cols;
  if (kb != k || c.rows != m || c.cols != n || d.rows != m || d.cols != n || c.type != d.type)
    return CUBLAS_STATUS_INVALID_VALUE;
  // COMPUTE_32F with f32 scales: A and B of one type, C f32 (or A's 16-bit type).
  if (op.compute != CUBLAS_COMPUTE_32F || op.scale != CUDA_R_32F || a.type != b.type ||
      (c.type != CUDA_R_32F && c.type != a.type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (op.pointer_mode != CUBLASLT_POINTER_MODE_HOST) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algo) {
    if (algo->id != split_k_algo && algo->id != workspace_algo && algo->id != plain_algo)
      return CUBLAS_STATUS_INVALID_VALUE;
    if (algo->split_k < 1 || (algo->split_k > 1) != (algo->reduction != 0))
      return CUBLAS_STATUS_INVALID_VALUE;  // split-K needs a reduction; one pass has none
  }
  if (algo && config().reject_n != 0 && n == config().reject_n) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

template <class T>
cublasStatus_t set(T& field, void const* buf, std::size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace fake_cublaslt

extern "C" {

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "an internal operation failed";
  }
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  if (auto const s = fake_cublaslt::config().fail_next_create; s != CUBLAS_STATUS_SUCCESS) {
    fake_cublaslt::config().fail_next_create = CUBLAS_STATUS_SUCCESS;
    return s;
  }
  *handle = reinterpret_cast<cublasLtHandle_t>(new char(0));
  fake_cublaslt::handles().insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  if (!fake_cublaslt::handles().erase(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete reinterpret_cast<char*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t{};
  fake_cublaslt::layouts()[*l] = {type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  if (!fake_cublaslt::layouts().erase(l)) return CUBLAS_STATUS_INVALID_VALUE;
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t size) {
  auto it = fake_cublaslt::layouts().find(l);
  if (it == fake_cublaslt::layouts().end()) return CUBLAS_STATUS_INVALID_VALUE;
  auto& x = it->second;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      std::uint32_t t = 0;
      auto const s = fake_cublaslt::set(t, buf, size);
      x.type = static_cast<cudaDataType_t>(t);
      return s;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return fake_cublaslt::set(x.order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return fake_cublaslt::set(x.rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return fake_cublaslt::set(x.cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return fake_cublaslt::set(x.ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return fake_cublaslt::set(x.batch, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new cublasLtMatmulDescOpaque_t{};
  fake_cublaslt::ops()[*d] = {compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  if (!fake_cublaslt::ops().erase(d)) return CUBLAS_STATUS_INVALID_VALUE;
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t size) {
  auto it = fake_cublaslt::ops().find(d);
  if (it == fake_cublaslt::ops().end()) return CUBLAS_STATUS_INVALID_VALUE;
  auto& x = it->second;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return fake_cublaslt::set(x.transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return fake_cublaslt::set(x.transb, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return fake_cublaslt::set(x.pointer_mode, buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  *p = new cublasLtMatmulPreferenceOpaque_t{};
  fake_cublaslt::preferences()[*p] = {};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  if (!fake_cublaslt::preferences().erase(p)) return CUBLAS_STATUS_INVALID_VALUE;
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t size) {
  auto it = fake_cublaslt::preferences().find(p);
  if (it == fake_cublaslt::preferences().end()) return CUBLAS_STATUS_INVALID_VALUE;
  auto& x = it->second;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return fake_cublaslt::set(x.max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return fake_cublaslt::set(x.reduction_mask, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return fake_cublaslt::set(x.align[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return fake_cublaslt::set(x.align[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return fake_cublaslt::set(x.align[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return fake_cublaslt::set(x.align[3], buf, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  namespace f = fake_cublaslt;
  if (!f::handles().count(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!returned || !results || requested < 1 || !f::preferences().count(pref))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (auto const s = f::config().fail_next_heuristic; s != CUBLAS_STATUS_SUCCESS) {
    f::config().fail_next_heuristic = CUBLAS_STATUS_SUCCESS;
    return s;
  }
  std::uint64_t m = 0, n = 0, k = 0;
  if (auto const s = f::validate(op, a, b, c, d, nullptr, m, n, k); s != CUBLAS_STATUS_SUCCESS)
    return s;
  auto const& p = f::preferences().at(pref);
  f::heuristic_limits().push_back(p.max_workspace);
  std::vector<f::algo_config> offer;
  if (f::config().offer_split_k && (p.reduction_mask & CUBLASLT_REDUCTION_SCHEME_INPLACE) != 0)
    offer.push_back(
        {f::split_k_algo, CUBLASLT_MATMUL_TILE_128x128, 4, CUBLASLT_REDUCTION_SCHEME_INPLACE});
  offer.push_back(
      {f::workspace_algo, CUBLASLT_MATMUL_TILE_128x256, 1, CUBLASLT_REDUCTION_SCHEME_NONE});
  if (f::config().offer_plain)
    offer.push_back(
        {f::plain_algo, CUBLASLT_MATMUL_TILE_64x128, 1, CUBLASLT_REDUCTION_SCHEME_NONE});
  *returned = 0;
  for (auto const& cfg : offer) {
    if (*returned == requested) break;
    if (f::workspace_needed(cfg) > p.max_workspace) continue;
    auto& r = results[*returned];
    r = {};
    f::store(r.algo, cfg);
    r.workspaceSize = f::workspace_needed(cfg);
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    ++*returned;
  }
  return *returned > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigSetAttribute(
    cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
    size_t size) {
  namespace f = fake_cublaslt;
  if (!algo) return CUBLAS_STATUS_INVALID_VALUE;
  auto c = f::config_of(*algo);
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  switch (attr) {
    case CUBLASLT_ALGO_CONFIG_TILE_ID:
      s = f::set(c.tile, buf, size);
      break;
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM:
      s = f::set(c.split_k, buf, size);
      break;
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
      s = f::set(c.reduction, buf, size);
      break;
    case CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING:
      s = f::set(c.swizzle, buf, size);
      break;
    case CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION:
      s = f::set(c.custom, buf, size);
      break;
    case CUBLASLT_ALGO_CONFIG_STAGES_ID:
      s = f::set(c.stages, buf, size);
      break;
    case CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID:
      s = f::set(c.inner_shape, buf, size);
      break;
    case CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID:
      s = f::set(c.cluster_shape, buf, size);
      break;
    default:  // CUBLASLT_ALGO_CONFIG_ID is read-only
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (s == CUBLAS_STATUS_SUCCESS) f::store(*algo, c);
  return s;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
    size_t size, size_t* written) {
  namespace f = fake_cublaslt;
  if (!algo) return CUBLAS_STATUS_INVALID_VALUE;
  auto const c = f::config_of(*algo);
  auto get = [&](auto const& field) {
    if (written) *written = sizeof(field);
    if (!buf || size != sizeof(field)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, &field, sizeof(field));
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_ALGO_CONFIG_ID:
      return get(c.id);
    case CUBLASLT_ALGO_CONFIG_TILE_ID:
      return get(c.tile);
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM:
      return get(c.split_k);
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
      return get(c.reduction);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoCheck(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result) {
  namespace f = fake_cublaslt;
  if (!f::handles().count(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!algo || !result) return CUBLAS_STATUS_INVALID_VALUE;
  auto const cfg = f::config_of(*algo);
  std::uint64_t m = 0, n = 0, k = 0;
  auto const s = f::validate(op, a, b, c, d, &cfg, m, n, k);
  cublasLtMatmulAlgo_t const copy = *algo;  // algo may point into result
  *result = {};
  result->algo = copy;
  result->state = s;
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  result->workspaceSize = f::workspace_needed(cfg);
  result->wavesCount = 1.0f;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha, const void* A,
    cublasLtMatrixLayout_t a, const void* B, cublasLtMatrixLayout_t b, const void* beta,
    const void* C, cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
    const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t) {
  namespace f = fake_cublaslt;
  if (!f::handles().count(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (auto const s = f::config().fail_next_matmul; s != CUBLAS_STATUS_SUCCESS) {
    f::config().fail_next_matmul = CUBLAS_STATUS_SUCCESS;
    return s;
  }
  if (!algo || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;  // no heuristic inside
  auto const cfg = f::config_of(*algo);
  std::uint64_t m = 0, n = 0, k = 0;
  if (auto const s = f::validate(op, a, b, c, d, &cfg, m, n, k); s != CUBLAS_STATUS_SUCCESS)
    return s;
  // Host pointer mode: alpha and beta are host floats; the operands are device memory.
  if (fake_cuda::on_device(alpha, 1) || fake_cuda::on_device(beta, 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  float const al = *static_cast<float const*>(alpha), be = *static_cast<float const*>(beta);
  auto const &la = f::layouts().at(a), &lb = f::layouts().at(b), &lc = f::layouts().at(c),
             &ld = f::layouts().at(d);
  auto on = [](void const* p, std::size_t bytes) {
    return bytes == 0 || fake_cuda::on_device(p, bytes);
  };
  if (!on(A, f::span_bytes(la)) || !on(B, f::span_bytes(lb)) || !on(D, f::span_bytes(ld)) ||
      (be != 0.0f && !on(C, f::span_bytes(lc))))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::size_t const need = f::workspace_needed(cfg);
  if (workspace_bytes < need || (workspace_bytes > 0 && !on(workspace, workspace_bytes)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (ld.type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;  // the fake writes f32 only
  auto const& o = f::ops().at(op);
  bool const ta = o.transa == CUBLAS_OP_T, tb = o.transb == CUBLAS_OP_T;
  f::calls().push_back({cfg, A, B, D, m, n, k, la.type, lb.type, workspace, workspace_bytes});
  std::vector<float> out(static_cast<std::size_t>(m * n));
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (std::uint64_t l = 0; l < k; ++l) {
        auto const ai = ta ? l + i * static_cast<std::uint64_t>(la.ld)
                           : i + l * static_cast<std::uint64_t>(la.ld);
        auto const bi = tb ? j + l * static_cast<std::uint64_t>(lb.ld)
                           : l + j * static_cast<std::uint64_t>(lb.ld);
        acc = std::fma(f::read(la.type, A, ai), f::read(lb.type, B, bi), acc);
      }
      float v = al * acc;
      if (be != 0.0f)
        v = std::fma(be, f::read(lc.type, C, i + j * static_cast<std::uint64_t>(lc.ld)), v);
      out[static_cast<std::size_t>(i + j * m)] = v;
    }
  // Written after every read: D may be C.
  for (std::uint64_t j = 0; j < n; ++j)
    for (std::uint64_t i = 0; i < m; ++i) {
      float const v = out[static_cast<std::size_t>(i + j * m)];
      auto const at = i + j * static_cast<std::uint64_t>(ld.ld);
      std::memcpy(static_cast<char*>(D) + 4 * at, &v, 4);
    }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
