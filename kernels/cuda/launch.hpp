#pragma once
/// The CUDA kernels' launchers, as the host code calls them: plain functions over device
/// pointers on one stream. Declared here for any C++ compiler; defined in kernels/cuda/launch.cuh,
/// which exactly one translation unit of a binary compiles with nvcc (tf stays header-only, and
/// the engine's templates never pass through nvcc: its host headers use fmt's consteval format
/// strings, which nvcc rejects). Every output element is summed in one fixed
/// order that depends on neither the batch nor the grid, so a row's results are the same alone or
/// batched (docs/kernel-contract.md lists each kernel's order).
#include <kernels/portable/sample_math.hpp>

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace tf::kernels::cuda {

/// A CUDA stream (cudaStream_t) without including the runtime's headers.
using stream_t = CUstream_st*;

/// A weight matrix in device memory: `rows` rows of `cols` elements of `type` (GGUF's type
/// number, as tf::model::tensor_type; this header stays free of tf's host-only headers so nvcc
/// never compiles them), row-major as the file holds them (each row `row_bytes`).
struct weight {
  std::uint32_t type = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::uint64_t row_bytes = 0;
  void const* data = nullptr;
};

/// True where the kernels can read `type` (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
/// Q3_K, Q4_K, Q5_K, Q6_K, Q8_K).
bool supports(std::uint32_t type);

enum class act_kind : unsigned char { gelu_tanh, silu, relu2 };
enum class rope_style : unsigned char { neox, interleaved };

/// y [n, w.rows] = x [n, w.cols] w^T; each y element is one warp's sum over 32-element chunks.
void matmul(weight const& w, float const* x, float* y, std::int64_t n, stream_t s);

/// x [n, w.cols] = scale * row tokens[t] of w, for device tokens [n].
void embed(weight const& w, std::int32_t const* tokens, std::int64_t n, float scale, float* x,
           stream_t s);

/// out[r, g..g+group) = rmsnorm(x[r, g..g+group)) * w, per group of `group` columns of each of
/// `rows` rows of `cols`; w holds `group` weights (shared by the groups) or `cols`. In place is
/// allowed (out == x).
void rmsnorm(float const* x, float const* w, std::int64_t w_size, float* out, std::int64_t rows,
             std::int64_t cols, std::int64_t group, float eps, stream_t s);

/// o = rmsnorm(o) * post when post; x += o; then o = rmsnorm(x) * next when next ([rows, cols]).
void residual(float* x, float* o, float const* post, float const* next, std::int64_t rows,
              std::int64_t cols, float eps, stream_t s);

/// x[i] += y[i] for i < n.
void add(float* x, float const* y, std::int64_t n, stream_t s);

/// x *= factor over n elements.
void scale(float* x, std::int64_t n, float factor, stream_t s);

/// y[r, c] += b[c] over rows x cols.
void add_bias(float* y, float const* b, std::int64_t rows, std::int64_t cols, stream_t s);

/// RoPE in place on the first `dims` of every head of `head_dim` in x [rows, heads * head_dim],
/// with cs [rows, dims] holding each row's cos (dims / 2) then sin (dims / 2).
void rope(float* x, float const* cs, std::int64_t rows, std::int64_t heads, int head_dim, int dims,
          rope_style style, stream_t s);

/// g = act(g) * u over n elements.
void glu(act_kind act, float* g, float const* u, std::int64_t n, stream_t s);

/// g [rows, ff] = act(gu[:, :ff]) * gu[:, ff:] for gu [rows, 2 ff].
void glu_merged(act_kind act, float const* gu, float* g, std::int64_t rows, std::int64_t ff,
                stream_t s);

/// x = act(x) over n elements.
void activate(act_kind act, float* x, std::int64_t n, stream_t s);

/// x *= sigmoid(gate) over n elements.
void sigmoid_gate(float* x, float const* gate, std::int64_t n, stream_t s);

/// dst [rows, groups * count] = columns [first, first + count) of each period-wide group of src
/// [rows, src_cols] (groups = src_cols / period).
void columns(float const* src, float* dst, std::int64_t rows, std::int64_t src_cols,
             std::int64_t first, std::int64_t count, std::int64_t period, stream_t s);

/// The gated grouped RMSNorm (see backend::cpu::gated_rmsnorm) over y, z [rows, cols], with w of
/// w_size (cols or group) weights.
void gated_rmsnorm(float* y, float const* z, float const* w, std::int64_t w_size, std::int64_t rows,
                   std::int64_t cols, std::int64_t group, float eps, bool norm_before_gate,
                   stream_t s);

/// x = softcap * tanh(x / softcap) over n elements.
void softcap(float* x, std::int64_t n, float cap, stream_t s);

/// dst [n, cols] = src rows idx[i] (device idx [n]).
void gather_rows(float const* src, std::int64_t const* idx, std::int64_t n, std::int64_t cols,
                 float* dst, stream_t s);

/// Device scratch of sample(): `work` [rows, vocab] where a row has adjustments; `keys` and
/// `sorted` [rows, vocab] (the sort's two buffers, both rewritten) and `sort_temp`
/// (sample_sort_bytes) where a row has a cut; `segments` [2, rows] and `state` [rows] always.
struct sample_scratch {
  float* work = nullptr;
  std::uint64_t* keys = nullptr;
  std::uint64_t* sorted = nullptr;
  std::int32_t* segments = nullptr;
  portable::sample_math::row_state* state = nullptr;
  void* sort_temp = nullptr;
  std::size_t sort_bytes = 0;
};

/// Bytes of the radix sort's temporary storage for `rows` rows of `vocab`.
std::size_t sample_sort_bytes(std::int64_t rows, std::int64_t vocab);

/// Samples each row of logits [rows, vocab] in sample_math's order: out[r] (device [rows]) gets
/// the token, its logprob and the top logprobs of row r, or a status saying why not. `params` is
/// a device copy of host_params [rows]; `adjust` the device list the rows' ranges index.
void sample(float const* logits, std::int64_t rows, std::int64_t vocab,
            portable::sample_math::row_params const* host_params,
            portable::sample_math::row_params const* params,
            portable::sample_math::logit_adjust const* adjust, sample_scratch const& scratch,
            portable::sample_math::row_result* out, stream_t s);

/// The paged KV of one layer: K and V pages [num_pages][page_tokens][kv_heads][head_dim], f16
/// (as IEEE half) or f32.
struct kv_layer {
  void* k = nullptr;
  void* v = nullptr;
  bool f16 = true;
  int page_tokens = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

/// Each token's place in the batch, on the device: its position, and where its row's page table
/// starts in `pages` (the rows' page tables back to back).
struct token_places {
  std::int32_t const* pos = nullptr;
  std::int64_t const* table = nullptr;
  std::int32_t const* pages = nullptr;
};

/// Writes k, v [n, kv_heads * head_dim] at each token's position.
void kv_write(kv_layer const& kv, token_places const& at, float const* k, float const* v,
              std::int64_t n, stream_t s);

/// Copies page `from` onto page `to` (K and V) of one layer.
void kv_copy_page(kv_layer const& kv, std::int32_t from, std::int32_t to, stream_t s);

/// out [n, heads * head_dim] = causal attention of q [n, heads * head_dim] over the layer's pages
/// up to each token's position (window > 0: the last `window` positions; softcap > 0 caps the
/// scores); scale multiplies q.k.
void attend(kv_layer const& kv, token_places const& at, float const* q, float* out, std::int64_t n,
            int heads, float scale, int window, float softcap, stream_t s);

/// The causal depthwise conv1d over one row's n tokens, in place on x [n, channels] (x's rows
/// `ld` apart), w [channels, kernel] oldest tap first, optional bias, silu after; `window` holds
/// the (kernel - 1) * channels inputs before the first token (zeroed first when reset) and is
/// left holding the last ones.
void conv1d(float* x, std::int64_t ld, std::int64_t n, std::int64_t channels, float const* w,
            int kernel, float const* bias, bool silu, float* window, bool reset, stream_t s);

/// The Mamba2 scan over one row's n tokens (see backend::cpu::ssm_scan): xbc rows `xbc_ld`
/// apart, dt rows `dt_ld` apart, y rows `y_ld` apart; state [heads, head_dim, state_size]
/// zeroed first when reset.
struct ssm_shape {
  int heads = 0, head_dim = 0, groups = 1, state_size = 0;
  float dt_min = 0.0f, dt_max = 3.4e38f;
};
void ssm_scan(ssm_shape const& p, float const* xbc, std::int64_t xbc_ld, float const* dt,
              std::int64_t dt_ld, float const* dt_bias, float const* a, float const* d,
              std::int64_t n, float* state, bool reset, float* y, std::int64_t y_ld, stream_t s);

/// The gated delta rule over one row's n tokens (see backend::cpu::gated_delta): qkv rows
/// `qkv_ld` apart, b and a rows `ba_ld` apart, out rows `out_ld` apart; state [v_heads, k_dim,
/// v_dim] zeroed first when reset.
struct delta_shape {
  int k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0;
  bool tiled = false;
  float norm_eps = 1e-6f;
};
void gated_delta(delta_shape const& p, float const* qkv, std::int64_t qkv_ld, float const* b,
                 float const* a, std::int64_t ba_ld, float const* dt_bias, float const* a_coef,
                 std::int64_t n, float* state, bool reset, float* out, std::int64_t out_ld,
                 stream_t s);

/// out [n, cols] = sum over j < k, in order, of weight[t k + j] * y[t k + j] (the MoE's picks
/// combined per token; y [n k, cols]); out is overwritten.
void moe_combine(float const* y, float const* weight, std::int64_t n, int k, std::int64_t cols,
                 float* out, stream_t s);

/// out[r, c] += scale * y[r, c], where scale is 1 or, with gate, sigmoid(gate[r]).
void add_scaled(float* out, float const* y, float const* gate, std::int64_t rows, std::int64_t cols,
                stream_t s);

/// Scatters y rows into dst rows idx[i] (dst[idx[i]] = y[i]).
void scatter_rows(float const* y, std::int64_t const* idx, std::int64_t n, std::int64_t cols,
                  float* dst, stream_t s);

/// The 16-bit float a cuBLASLt operand is rounded to (kernels/cuda/convert.cuh).
enum class half_kind : unsigned char { f16, bf16 };

/// dst [n] (IEEE half or bfloat16 bits) = src [n] f32 rounded to nearest even.
void round_rows(float const* src, std::uint16_t* dst, std::int64_t n, half_kind kind, stream_t s);

/// dst [count, w.cols] (half or bfloat16 bits) = rows [first, first + count) of w dequantized
/// (bit-exact with the CPU's dequantization) and rounded to nearest even.
void dequantize_rows(weight const& w, std::int64_t first, std::int64_t count, half_kind kind,
                     std::uint16_t* dst, stream_t s);

}  // namespace tf::kernels::cuda
