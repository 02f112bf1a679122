#pragma once
/// Host definitions of every launcher kernels/cuda/launch.hpp declares, for a test binary without
/// nvcc or a GPU: each computes what its kernel computes, output by output in the kernel's order,
/// through the TF_HD arithmetic and host emulations of kernels/cuda/*_math.hpp and quant.hpp (the
/// stream is ignored: the host runs in program order). Each launcher throws where its kernel's
/// launcher throws, and also where a pointer it reads or writes leaves the fake device's
/// allocations (fake_cuda_runtime.hpp), which a GPU would only show as garbage or a fault.
/// Include this file (it brings fake_cuda_runtime.hpp, fake_cublaslt.hpp and host_convert.hpp)
/// in exactly one translation unit.
#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cuda/attention_math.hpp>
#include <kernels/cuda/launch.hpp>
#include <kernels/cuda/norm_math.hpp>
#include <kernels/cuda/quant.hpp>
#include <kernels/cuda/recurrent_math.hpp>
#include <kernels/portable/elementwise_math.hpp>
#include <tests/cuda_host/fake_cublaslt.hpp>
#include <tests/cuda_host/fake_cuda_runtime.hpp>
#include <tests/cuda_host/host_sample_launchers.hpp>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace tf::kernels::cuda {

namespace host_detail {

/// Throws unless [p, p + bytes) is device memory (a nullptr of no bytes is fine).
inline void on_device(void const* p, std::int64_t bytes, char const* launcher, char const* what) {
  if (bytes <= 0) return;
  if (!fake_cuda::on_device(p, static_cast<std::size_t>(bytes)))
    throw std::runtime_error(std::string("tf::kernels::cuda::") + launcher + ": " + what + " (" +
                             std::to_string(bytes) + " bytes) is not inside a device allocation");
}
template <class T>
void on_device_n(T const* p, std::int64_t n, char const* launcher, char const* what) {
  on_device(p, n * static_cast<std::int64_t>(sizeof(T)), launcher, what);
}

// As matmul.cuh's check_weight.
inline void check_weight(weight const& w, char const* launcher) {
  std::string const where = std::string("tf::kernels::cuda::") + launcher + ": ";
  if (!supported(w.type))
    throw std::runtime_error(where + "no CUDA kernel reads GGUF type " + std::to_string(w.type));
  if (w.rows < 0 || w.cols < 0) throw std::runtime_error(where + "negative shape");
  int const elems = block_elems(w.type);
  if (w.cols % elems != 0)
    throw std::runtime_error(where + std::to_string(w.cols) + " columns are not whole blocks");
  auto const need = static_cast<std::uint64_t>(w.cols / elems * block_bytes(w.type));
  if (w.row_bytes < need) throw std::runtime_error(where + "rows shorter than their elements");
  if (w.rows > 0 && w.cols > 0 && w.data == nullptr)
    throw std::runtime_error(where + "no weight data");
  on_device(w.data, w.rows * static_cast<std::int64_t>(w.row_bytes), launcher, "the weights");
}

// As norm.cuh's norm_blocks.
inline void check_norm(std::int64_t rows, std::int64_t cols, std::int64_t group,
                       std::int64_t w_size, char const* what) {
  if (rows < 0 || group <= 0 || cols % group != 0 || (w_size != group && w_size != cols))
    throw std::invalid_argument(std::string("tf: CUDA ") + what + " of " + std::to_string(rows) +
                                " x " + std::to_string(cols) + " in groups of " +
                                std::to_string(group) + " with " + std::to_string(w_size) +
                                " weights");
}

inline float act(act_kind a, float x) {
  switch (a) {
    case act_kind::gelu_tanh:
      return portable::elementwise_math::gelu_tanh(x);
    case act_kind::silu:
      return portable::elementwise_math::silu(x);
    case act_kind::relu2:
      return portable::elementwise_math::relu2(x);
  }
  throw std::invalid_argument("tf: CUDA kernels got an unknown activation");
}

inline void check_act(act_kind a) {
  (void)act(a, 0.0f);
}

// As attention.cuh's attn_check_layer.
inline void check_layer(kv_layer const& kv, char const* what) {
  if (!kv.k || !kv.v || kv.page_tokens <= 0 || kv.kv_heads <= 0 || kv.head_dim <= 0)
    throw std::invalid_argument(std::string("tf: CUDA ") + what + " over a KV layer of " +
                                std::to_string(kv.kv_heads) + " heads of " +
                                std::to_string(kv.head_dim) + " in pages of " +
                                std::to_string(kv.page_tokens));
}

// Element offset of token t's position p in a layer's pages (attention.cuh's attn_row_at), its
// page-table entry checked on the way.
inline std::int64_t row_at(token_places const& at, std::int64_t t, std::int32_t p, int page_tokens,
                           std::int64_t kv_dim, char const* launcher) {
  std::int32_t const* entry = at.pages + at.table[t] + p / page_tokens;
  on_device_n(entry, 1, launcher, "a page-table entry");
  return (static_cast<std::int64_t>(*entry) * page_tokens + p % page_tokens) * kv_dim;
}

inline void check_places(token_places const& at, std::int64_t n, char const* launcher) {
  on_device_n(at.pos, n, launcher, "the positions");
  on_device_n(at.table, n, launcher, "the page-table starts");
}

inline void recurrent_require(bool ok, char const* what) {
  if (!ok) throw std::runtime_error(std::string("tf: CUDA ") + what);
}

// Floats from the first of n rows `ld` apart to the end of the last one's `width`.
inline std::int64_t strided(std::int64_t n, std::int64_t ld, std::int64_t width) {
  return n > 0 ? (n - 1) * ld + width : 0;
}

}  // namespace host_detail

namespace emu = host_detail;

bool supports(std::uint32_t type) {
  return supported(type);
}

void matmul(weight const& w, float const* x, float* y, std::int64_t n, stream_t) {
  emu::check_weight(w, "matmul");
  if (n < 0) throw std::runtime_error("tf::kernels::cuda::matmul: negative token count");
  if (n == 0 || w.rows == 0) return;
  emu::on_device_n(x, n * w.cols, "matmul", "x");
  emu::on_device_n(y, n * w.rows, "matmul", "y");
  auto const* data = static_cast<std::uint8_t const*>(w.data);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t r = 0; r < w.rows; ++r)
      y[t * w.rows + r] = matvec_row_reference(
          w.type, data + r * static_cast<std::int64_t>(w.row_bytes), x + t * w.cols, w.cols);
}

void embed(weight const& w, std::int32_t const* tokens, std::int64_t n, float scale, float* x,
           stream_t) {
  emu::check_weight(w, "embed");
  if (n < 0) throw std::runtime_error("tf::kernels::cuda::embed: negative token count");
  if (n * chunk_count(w.cols) == 0) return;
  emu::on_device_n(tokens, n, "embed", "the tokens");
  emu::on_device_n(x, n * w.cols, "embed", "x");
  auto const* data = static_cast<std::uint8_t const*>(w.data);
  for (std::int64_t t = 0; t < n; ++t) {
    std::int64_t const token = tokens[t];
    for (std::int64_t c = 0; c < chunk_count(w.cols); ++c) {
      int const len = chunk_length(w.cols, c);
      float v[chunk_elems];
      if (token >= 0 && token < w.rows)
        dequant_chunk(w.type, data + token * static_cast<std::int64_t>(w.row_bytes), c, len, v);
      else
        std::fill_n(v, chunk_elems, bits_to_f32(0x7fc00000u));
      float* out = x + t * w.cols + c * chunk_elems;
      for (int j = 0; j < len; ++j) out[j] = scale == 1.0f ? v[j] : v[j] * scale;
    }
  }
}

void rmsnorm(float const* x, float const* w, std::int64_t w_size, float* out, std::int64_t rows,
             std::int64_t cols, std::int64_t group, float eps, stream_t) {
  emu::check_norm(rows, cols, group, w_size, "rmsnorm");
  if (rows * (cols / group) == 0) return;
  emu::on_device_n(x, rows * cols, "rmsnorm", "x");
  emu::on_device_n(w, w_size, "rmsnorm", "w");
  emu::on_device_n(out, rows * cols, "rmsnorm", "out");
  norm_math::rmsnorm_rows(x, w, w_size, out, rows, cols, group, eps);
}

void residual(float* x, float* o, float const* post, float const* next, std::int64_t rows,
              std::int64_t cols, float eps, stream_t) {
  if (rows <= 0 || cols <= 0) return;
  emu::on_device_n(x, rows * cols, "residual", "x");
  emu::on_device_n(o, rows * cols, "residual", "o");
  if (post) emu::on_device_n(post, cols, "residual", "post");
  if (next) emu::on_device_n(next, cols, "residual", "next");
  for (std::int64_t r = 0; r < rows; ++r)
    norm_math::residual_row(x + r * cols, o + r * cols, post, next, cols, eps);
}

void add(float* x, float const* y, std::int64_t n, stream_t) {
  if (n <= 0) return;
  emu::on_device_n(x, n, "add", "x");
  emu::on_device_n(y, n, "add", "y");
  for (std::int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale(float* x, std::int64_t n, float factor, stream_t) {
  if (n <= 0) return;
  emu::on_device_n(x, n, "scale", "x");
  for (std::int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void add_bias(float* y, float const* b, std::int64_t rows, std::int64_t cols, stream_t) {
  if (rows <= 0 || cols <= 0) return;
  emu::on_device_n(y, rows * cols, "add_bias", "y");
  emu::on_device_n(b, cols, "add_bias", "b");
  for (std::int64_t i = 0; i < rows * cols; ++i) y[i] += b[i % cols];
}

void rope(float* x, float const* cs, std::int64_t rows, std::int64_t heads, int head_dim, int dims,
          rope_style style, stream_t) {
  if (dims <= 0 || dims % 2 != 0 || dims > head_dim || heads < 0 || rows < 0)
    throw std::invalid_argument("tf: CUDA rope of " + std::to_string(dims) +
                                " dims over heads of " + std::to_string(head_dim));
  if (rows * heads == 0) return;
  emu::on_device_n(x, rows * heads * head_dim, "rope", "x");
  emu::on_device_n(cs, rows * dims, "rope", "the cos | sin table");
  int const half = dims / 2;
  bool const neox = style == rope_style::neox;
  for (std::int64_t head = 0; head < rows * heads; ++head) {
    float* xh = x + head * head_dim;
    float const* c = cs + head / heads * dims;
    for (int pair = 0; pair < half; ++pair) {
      int const a = neox ? pair : 2 * pair, b = neox ? pair + half : 2 * pair + 1;
      if (neox)
        portable::elementwise_math::rotate_neox(xh[a], xh[b], c[pair], c[half + pair]);
      else
        portable::elementwise_math::rotate_interleaved(xh[a], xh[b], c[pair], c[half + pair]);
    }
  }
}

void glu(act_kind act, float* g, float const* u, std::int64_t n, stream_t) {
  if (n <= 0) return;
  emu::check_act(act);
  emu::on_device_n(g, n, "glu", "g");
  emu::on_device_n(u, n, "glu", "u");
  for (std::int64_t i = 0; i < n; ++i) g[i] = emu::act(act, g[i]) * u[i];
}

void glu_merged(act_kind act, float const* gu, float* g, std::int64_t rows, std::int64_t ff,
                stream_t) {
  if (rows <= 0 || ff <= 0) return;
  emu::check_act(act);
  emu::on_device_n(gu, rows * 2 * ff, "glu_merged", "gu");
  emu::on_device_n(g, rows * ff, "glu_merged", "g");
  for (std::int64_t i = 0; i < rows * ff; ++i) {
    float const* row = gu + i / ff * 2 * ff;
    std::int64_t const c = i % ff;
    g[i] = emu::act(act, row[c]) * row[ff + c];
  }
}

void activate(act_kind act, float* x, std::int64_t n, stream_t) {
  if (n <= 0) return;
  emu::check_act(act);
  emu::on_device_n(x, n, "activate", "x");
  for (std::int64_t i = 0; i < n; ++i) x[i] = emu::act(act, x[i]);
}

void sigmoid_gate(float* x, float const* gate, std::int64_t n, stream_t) {
  if (n <= 0) return;
  emu::on_device_n(x, n, "sigmoid_gate", "x");
  emu::on_device_n(gate, n, "sigmoid_gate", "gate");
  for (std::int64_t i = 0; i < n; ++i) x[i] *= portable::elementwise_math::sigmoid(gate[i]);
}

void columns(float const* src, float* dst, std::int64_t rows, std::int64_t src_cols,
             std::int64_t first, std::int64_t count, std::int64_t period, stream_t) {
  std::int64_t const per = period > 0 ? period : src_cols;
  if (rows < 0 || per <= 0 || src_cols % per != 0 || first < 0 || count < 0 || first + count > per)
    throw std::invalid_argument("tf: CUDA columns " + std::to_string(first) + ".." +
                                std::to_string(first + count) + " of period " +
                                std::to_string(per) + " from rows of " + std::to_string(src_cols));
  std::int64_t const dst_cols = src_cols / per * count, n = rows * dst_cols;
  if (n <= 0) return;
  emu::on_device_n(src, rows * src_cols, "columns", "src");
  emu::on_device_n(dst, n, "columns", "dst");
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t const r = i / dst_cols, c = i % dst_cols;
    dst[i] = src[r * src_cols + c / count * per + first + c % count];
  }
}

void gated_rmsnorm(float* y, float const* z, float const* w, std::int64_t w_size, std::int64_t rows,
                   std::int64_t cols, std::int64_t group, float eps, bool norm_before_gate,
                   stream_t) {
  emu::check_norm(rows, cols, group, w_size, "gated_rmsnorm");
  if (rows * (cols / group) == 0) return;
  emu::on_device_n(y, rows * cols, "gated_rmsnorm", "y");
  emu::on_device_n(z, rows * cols, "gated_rmsnorm", "z");
  emu::on_device_n(w, w_size, "gated_rmsnorm", "w");
  for (std::int64_t r = 0; r < rows; ++r)
    norm_math::gated_rmsnorm_row(y + r * cols, z + r * cols, w, w_size, cols, group, eps,
                                 norm_before_gate);
}

void softcap(float* x, std::int64_t n, float cap, stream_t) {
  if (n <= 0) return;
  emu::on_device_n(x, n, "softcap", "x");
  for (std::int64_t i = 0; i < n; ++i) x[i] = portable::elementwise_math::softcap(x[i], cap);
}

void gather_rows(float const* src, std::int64_t const* idx, std::int64_t n, std::int64_t cols,
                 float* dst, stream_t) {
  if (n <= 0 || cols <= 0) return;
  emu::on_device_n(idx, n, "gather_rows", "idx");
  emu::on_device_n(dst, n * cols, "gather_rows", "dst");
  for (std::int64_t i = 0; i < n; ++i) {
    emu::on_device_n(src + idx[i] * cols, cols, "gather_rows", "a source row");
    std::memcpy(dst + i * cols, src + idx[i] * cols, static_cast<std::size_t>(cols) * 4);
  }
}

void kv_write(kv_layer const& kv, token_places const& at, float const* k, float const* v,
              std::int64_t n, stream_t) {
  emu::check_layer(kv, "kv_write");
  if (n <= 0) return;
  std::int64_t const kv_dim = static_cast<std::int64_t>(kv.kv_heads) * kv.head_dim;
  std::int64_t const elem = kv.f16 ? 2 : 4;
  emu::check_places(at, n, "kv_write");
  emu::on_device_n(k, n * kv_dim, "kv_write", "k");
  emu::on_device_n(v, n * kv_dim, "kv_write", "v");
  // One token's K or V row into its place, rounded to nearest even for f16 as __float2half_rn.
  auto const store = [&](void* base, std::int64_t row, float const* src) {
    emu::on_device(static_cast<char*>(base) + row * elem, kv_dim * elem, "kv_write", "a KV row");
    if (kv.f16) {
      auto* dst = static_cast<std::uint16_t*>(base) + row;
      for (std::int64_t i = 0; i < kv_dim; ++i) dst[i] = kernels::cpu::fp32_to_fp16(src[i]);
    } else {
      std::memcpy(static_cast<float*>(base) + row, src, static_cast<std::size_t>(kv_dim) * 4);
    }
  };
  for (std::int64_t t = 0; t < n; ++t) {
    std::int64_t const row = emu::row_at(at, t, at.pos[t], kv.page_tokens, kv_dim, "kv_write");
    store(kv.k, row, k + t * kv_dim);
    store(kv.v, row, v + t * kv_dim);
  }
}

void kv_copy_page(kv_layer const& kv, std::int32_t from, std::int32_t to, stream_t s) {
  emu::check_layer(kv, "kv_copy_page");
  if (from < 0 || to < 0)
    throw std::invalid_argument("tf: CUDA kv_copy_page " + std::to_string(from) + " -> " +
                                std::to_string(to));
  if (from == to) return;
  std::size_t const bytes = static_cast<std::size_t>(kv.page_tokens) *
                            static_cast<std::size_t>(kv.kv_heads) *
                            static_cast<std::size_t>(kv.head_dim) * (kv.f16 ? 2u : 4u);
  for (void* base : {kv.k, kv.v}) {
    auto* bytes_at = static_cast<char*>(base);
    cudaError_t const e = cudaMemcpyAsync(bytes_at + static_cast<std::size_t>(to) * bytes,
                                          bytes_at + static_cast<std::size_t>(from) * bytes, bytes,
                                          cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("tf: CUDA kv_copy_page failed: ") +
                               cudaGetErrorString(e));
  }
}

void attend(kv_layer const& kv, token_places const& at, float const* q, float* out, std::int64_t n,
            int heads, float scale, int window, float softcap, stream_t) {
  namespace am = attention_math;
  emu::check_layer(kv, "attend");
  if (kv.head_dim > am::max_head_dim || heads <= 0 || heads % kv.kv_heads != 0)
    throw std::invalid_argument("tf: CUDA attend of " + std::to_string(heads) + " heads over " +
                                std::to_string(kv.kv_heads) + " KV heads of " +
                                std::to_string(kv.head_dim) + " (at most " +
                                std::to_string(am::max_head_dim) + ")");
  if (n <= 0) return;
  if (n * heads > INT_MAX)
    throw std::invalid_argument("tf: CUDA attend over " + std::to_string(n) + " tokens x " +
                                std::to_string(heads) + " heads");
  int const head_dim = kv.head_dim;
  auto const dim = static_cast<std::size_t>(head_dim);
  std::int64_t const kv_dim = static_cast<std::int64_t>(kv.kv_heads) * head_dim;
  std::int64_t const elem = kv.f16 ? 2 : 4;
  emu::check_places(at, n, "attend");
  emu::on_device_n(q, n * heads * head_dim, "attend", "q");
  emu::on_device_n(out, n * heads * head_dim, "attend", "out");
  std::vector<float> qs(dim), k_f, v_f;
  std::vector<float const*> k_rows, v_rows;
  // Key j's row of K or V as f32: in place for f32 pages; halves convert exactly, as the
  // kernel's reads do.
  auto const load = [&](void const* base, std::int64_t row, std::vector<float>& f, std::size_t j) {
    emu::on_device(static_cast<char const*>(base) + row * elem, head_dim * elem, "attend",
                   "a KV row");
    if (!kv.f16) return static_cast<float const*>(base) + row;
    auto const* src = static_cast<std::uint16_t const*>(base) + row;
    float* dst = f.data() + j * dim;
    for (std::size_t d = 0; d < dim; ++d) dst[d] = f16_to_f32(src[d]);
    return static_cast<float const*>(dst);
  };
  for (std::int64_t t = 0; t < n; ++t) {
    std::int32_t const pos = at.pos[t];
    std::int32_t const lo = window > 0 ? std::max(0, pos - window + 1) : 0;
    auto const keys = static_cast<std::size_t>(pos >= lo ? pos - lo + 1 : 0);
    k_rows.resize(keys);
    v_rows.resize(keys);
    k_f.resize(keys * dim);
    v_f.resize(keys * dim);
    for (int h = 0; h < heads; ++h) {
      std::int64_t const head_at = static_cast<std::int64_t>(h / (heads / kv.kv_heads)) * head_dim;
      std::int64_t const q_at = (t * heads + h) * head_dim;
      for (std::size_t d = 0; d < dim; ++d) qs[d] = q[q_at + static_cast<std::int64_t>(d)] * scale;
      for (std::size_t j = 0; j < keys; ++j) {
        std::int64_t const row = emu::row_at(at, t, lo + static_cast<std::int32_t>(j),
                                             kv.page_tokens, kv_dim, "attend") +
                                 head_at;
        k_rows[j] = load(kv.k, row, k_f, j);
        v_rows[j] = load(kv.v, row, v_f, j);
      }
      am::attend_query(qs.data(), head_dim, static_cast<int>(keys), k_rows.data(), v_rows.data(),
                       softcap, out + q_at);
    }
  }
}

void conv1d(float* x, std::int64_t ld, std::int64_t n, std::int64_t channels, float const* w,
            int kernel, float const* bias, bool silu, float* window, bool reset, stream_t) {
  emu::recurrent_require(n >= 0 && channels >= 0 && ld >= channels && kernel >= 1 &&
                             kernel <= recurrent_math::max_kernel,
                         "conv1d wants a kernel of 1..16 taps over rows of at least channels");
  if (channels == 0) return;
  emu::on_device_n(x, emu::strided(n, ld, channels), "conv1d", "x");
  emu::on_device_n(w, channels * kernel, "conv1d", "w");
  if (bias) emu::on_device_n(bias, channels, "conv1d", "bias");
  emu::on_device_n(window, (kernel - 1) * channels, "conv1d", "the window");
  recurrent_math::conv1d_row(x, ld, n, channels, w, kernel, bias, silu, window, reset);
}

void ssm_scan(ssm_shape const& p, float const* xbc, std::int64_t xbc_ld, float const* dt,
              std::int64_t dt_ld, float const* dt_bias, float const* a, float const* d,
              std::int64_t n, float* state, bool reset, float* y, std::int64_t y_ld, stream_t) {
  emu::recurrent_require(
      n >= 0 && p.heads > 0 && p.head_dim > 0 && p.groups > 0 && p.heads % p.groups == 0,
      "ssm_scan wants heads, a head size and groups that divide the heads");
  emu::recurrent_require(p.state_size >= 1 && p.state_size <= 256,
                         "ssm_scan wants a state size of 1..256");
  std::int64_t const d_inner = static_cast<std::int64_t>(p.heads) * p.head_dim;
  std::int64_t const ds = p.state_size;
  emu::on_device_n(xbc, emu::strided(n, xbc_ld, d_inner + 2 * p.groups * ds), "ssm_scan", "xbc");
  emu::on_device_n(dt, emu::strided(n, dt_ld, p.heads), "ssm_scan", "dt");
  for (float const* v : {dt_bias, a, d}) emu::on_device_n(v, p.heads, "ssm_scan", "a head vector");
  emu::on_device_n(state, d_inner * ds, "ssm_scan", "the state");
  emu::on_device_n(y, emu::strided(n, y_ld, d_inner), "ssm_scan", "y");
  recurrent_math::ssm_scan_row(p, xbc, xbc_ld, dt, dt_ld, dt_bias, a, d, n, state, reset, y, y_ld);
}

void gated_delta(delta_shape const& p, float const* qkv, std::int64_t qkv_ld, float const* b,
                 float const* a, std::int64_t ba_ld, float const* dt_bias, float const* a_coef,
                 std::int64_t n, float* state, bool reset, float* out, std::int64_t out_ld,
                 stream_t) {
  emu::recurrent_require(n >= 0 && p.k_heads > 0 && p.v_heads > 0 && p.v_heads % p.k_heads == 0 &&
                             p.v_dim >= 1 && p.v_dim <= 256 && p.v_heads <= 65535,
                         "gated_delta wants k-heads that divide the v-heads and v_dim 1..256");
  emu::recurrent_require(p.k_dim >= 1 && p.k_dim <= 256, "gated_delta wants a k_dim of 1..256");
  std::int64_t const k_all = static_cast<std::int64_t>(p.k_heads) * p.k_dim;
  std::int64_t const v_all = static_cast<std::int64_t>(p.v_heads) * p.v_dim;
  emu::on_device_n(qkv, emu::strided(n, qkv_ld, 2 * k_all + v_all), "gated_delta", "qkv");
  emu::on_device_n(b, emu::strided(n, ba_ld, p.v_heads), "gated_delta", "b");
  emu::on_device_n(a, emu::strided(n, ba_ld, p.v_heads), "gated_delta", "a");
  emu::on_device_n(dt_bias, p.v_heads, "gated_delta", "dt_bias");
  emu::on_device_n(a_coef, p.v_heads, "gated_delta", "a_coef");
  emu::on_device_n(state, v_all * p.k_dim, "gated_delta", "the state");
  emu::on_device_n(out, emu::strided(n, out_ld, v_all), "gated_delta", "out");
  recurrent_math::gated_delta_row(p, qkv, qkv_ld, b, a, ba_ld, dt_bias, a_coef, n, state, reset,
                                  out, out_ld);
}

void moe_combine(float const* y, float const* weight, std::int64_t n, int k, std::int64_t cols,
                 float* out, stream_t) {
  if (n <= 0 || cols <= 0) return;
  if (k < 0) throw std::invalid_argument("tf: CUDA moe_combine of " + std::to_string(k) + " picks");
  emu::on_device_n(y, n * k * cols, "moe_combine", "y");
  emu::on_device_n(weight, n * k, "moe_combine", "the weights");
  emu::on_device_n(out, n * cols, "moe_combine", "out");
  for (std::int64_t i = 0; i < n * cols; ++i) {
    std::int64_t const t = i / cols, c = i % cols;
    out[i] =
        portable::elementwise_math::weighted_picks(weight + t * k, y + t * k * cols + c, cols, k);
  }
}

void add_scaled(float* out, float const* y, float const* gate, std::int64_t rows, std::int64_t cols,
                stream_t) {
  if (rows <= 0 || cols <= 0) return;
  emu::on_device_n(out, rows * cols, "add_scaled", "out");
  emu::on_device_n(y, rows * cols, "add_scaled", "y");
  if (gate) emu::on_device_n(gate, rows, "add_scaled", "gate");
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    float const scale = gate ? portable::elementwise_math::sigmoid(gate[i / cols]) : 1.0f;
    out[i] = portable::elementwise_math::add_scaled(out[i], y[i], scale);
  }
}

void scatter_rows(float const* y, std::int64_t const* idx, std::int64_t n, std::int64_t cols,
                  float* dst, stream_t) {
  if (n <= 0 || cols <= 0) return;
  emu::on_device_n(y, n * cols, "scatter_rows", "y");
  emu::on_device_n(idx, n, "scatter_rows", "idx");
  for (std::int64_t i = 0; i < n; ++i) {
    emu::on_device_n(dst + idx[i] * cols, cols, "scatter_rows", "a destination row");
    std::memcpy(dst + idx[i] * cols, y + i * cols, static_cast<std::size_t>(cols) * 4);
  }
}

}  // namespace tf::kernels::cuda

#include <tests/cuda_host/host_convert.hpp>  // after the launchers: it uses their checks
