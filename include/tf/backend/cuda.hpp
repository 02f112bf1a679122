#pragma once
/// The CUDA backend: the backend concept's operations over kernels/cuda, on one device's memory,
/// in order on the device's default stream. Each output element is summed in one fixed order
/// (docs/kernel-contract.md), so a row's results do not depend on the batch. The kernels are
/// defined in kernels/cuda/launch.cuh, which one nvcc-compiled translation unit of the binary
/// includes (CMake's tf::cuda_kernels target); this header needs only the CUDA runtime's C API
/// and cuBLASLt's (cuda_options::matmul).
#include <kernels/cuda/launch.hpp>
#include <tf/backend/backend.hpp>
#include <tf/backend/cuda/blaslt.hpp>
#include <tf/backend/cuda/device.hpp>
#include <tf/backend/cuda/kv_store.hpp>
#include <tf/backend/cuda/sampling.hpp>
#include <tf/backend/cuda/state_store.hpp>
#include <tf/backend/cuda/step.hpp>
#include <tf/backend/host_matrix.hpp>
#include <tf/backend/routing.hpp>
#include <tf/backend/store_checks.hpp>
#include <tf/dist/tensor_parallel.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_type.hpp>
#include <tf/model/tensor_view.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace tf::backend {

/// The CUDA backend's settings.
struct cuda_options {
  int device = 0;                         // the CUDA device index
  cuda_matmul matmul = cuda_matmul::own;  // tf's kernel, or cuBLASLt for every weight
  /// The ranks the weights are split over (tensor parallelism over NCCL; one rank by default).
  dist::tensor_parallel ranks{};
};

namespace cuda_parts {

/// A weight matrix in device memory, row-major as the file holds it.
struct matrix {
  model::tensor_type type{};
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::uint64_t row_bytes = 0;
  device_array<std::byte> bytes;
  std::shared_ptr<blaslt_plan> plan;  // set where cuBLASLt runs this weight
  bool partial_sum = false;           // a rank's input features: its product is all-reduced
  std::int64_t vocab = 0;  // > 0: a head split by vocabulary, this rank's rows of `vocab`

  bool empty() const { return rows == 0; }
  kernels::cuda::weight view() const {
    return {static_cast<std::uint32_t>(type), rows, cols, row_bytes, bytes.data()};
  }
};

/// A bound f32 vector (norm weights, biases) in device memory.
struct vector {
  device_array<float> values;
  std::vector<float> host;  // the same values, for what runs on the host (MoE routing's bias)

  std::size_t size() const { return values.size(); }
  bool empty() const { return values.empty(); }
  float const* data() const { return values.data(); }
};

/// One expert's MLP: gate and up [n_ff, hidden], down [hidden, n_ff]; without a gate, down(act(up
/// x)).
struct expert {
  matrix gate, up, down;
};

/// An activation [rows, cols] in f32, in device memory.
struct buffer {
  device_array<float> values;
  std::int64_t rows = 0, cols = 0;

  float* data() { return values.data(); }
  float const* data() const { return values.data(); }
};

}  // namespace cuda_parts

class cuda {
 public:
  static constexpr std::string_view name = "cuda";
  /// A discrete card's own memory; an integrated device (device_info::integrated) is budgeted as
  /// host memory by the caller.
  static constexpr memory_kind memory = memory_kind::discrete;

  using options = cuda_options;
  using matrix = cuda_parts::matrix;
  using vector = cuda_parts::vector;
  using step = cuda_parts::step;
  using kv_store = cuda_parts::kv_store;
  using state_store = cuda_parts::state_store;
  using expert = cuda_parts::expert;
  using buffer = cuda_parts::buffer;

  explicit cuda(options o = {}) : device_(cuda_parts::query_device(o.device)) {
    dist::check_ranks_for(o.ranks, "CUDA", dist::memory_space::device, "an NCCL communicator");
    if (o.matmul == cuda_matmul::cublaslt) blaslt_ = std::make_shared<cuda_parts::blaslt>();
    ranks_ = std::move(o.ranks);
  }

  /// The ranks the weights are split over (tensor parallelism; one rank by default).
  dist::tensor_parallel const& ranks() const { return ranks_; }
  /// Bytes of weights uploaded to the device so far (matrices and vectors).
  std::uint64_t uploaded_bytes() const { return uploaded_; }

  /// The weights bound to this backend, as backend::cpu reports them: on a device every byte is
  /// a copy made at the bind, in device memory from then on. Under tensor parallelism, this
  /// rank's share.
  struct bound_weights {
    std::uint64_t bytes = 0;
    std::uint64_t copied_bytes = 0;
  };
  bound_weights weights_bound() const { return {uploaded_, uploaded_}; }

  cuda_parts::device_info const& device() const { return device_; }
  /// The cuBLASLt context where options::matmul is cublaslt, else null.
  cuda_parts::blaslt const* blaslt() const { return blaslt_.get(); }

  /// Device bytes the backend allocates at start beside the weights (the memory budget counts
  /// them with the weights): cuBLASLt's workspace and dequantization tile, or none.
  static std::uint64_t scratch_bytes(options const& o) {
    return cuda_parts::blaslt_scratch_bytes(o.matmul);
  }

  /// The start-up line's prefix: "CUDA sm_90 device 0 (NVIDIA H200)".
  static std::string label(cuda_parts::device_info const& d) {
    return fmt::format("CUDA sm_{} device {} ({})", d.sm, d.index, d.name);
  }

  /// The SUMMARY line: the device and the kernels every forward uses.
  static std::string summary(cuda_parts::device_info const& d,
                             cuda_matmul matmul = cuda_matmul::own) {
    return fmt::format(
        "tf: cuda SUMMARY: {}; {}; attend: one block "
        "per token and head, online softmax over key tiles of the paged KV; rmsnorm, residual, "
        "gated_rmsnorm: one block per row, fixed tree; rope from host angles; glu, conv1d, "
        "ssm_scan, gated_delta; MoE routed on the host, experts on the device; sampling on the "
        "device (greedy, top-k/top-p/min-p, penalties, bias; one block per row, CUB radix sort "
        "for cuts), grammar-constrained rows on the host (docs/kernel-contract.md)",
        label(d), cuda_parts::matmul_summary(matmul));
  }

  // Binding: host weights are copied to the device once.
  matrix upload(host_matrix m) const {
    if (!m.empty() && !kernels::cuda::supports(static_cast<std::uint32_t>(m.type)))
      throw error("tf: the CUDA backend cannot read {} weights", model::traits_of(m.type).name);
    matrix d{m.type, m.rows, m.cols, m.row_bytes, {}, {}, m.partial_sum};
    d.bytes.upload(m.data,
                   static_cast<std::size_t>(m.row_bytes * static_cast<std::uint64_t>(m.rows)));
    uploaded_ += m.row_bytes * static_cast<std::uint64_t>(m.rows);
    if (blaslt_) d.plan = blaslt_->plan(d.view());
    return d;
  }
  vector upload(std::vector<float> v) const {
    vector d;
    d.values.upload(v.data(), v.size());
    uploaded_ += v.size() * sizeof(float);
    d.host = std::move(v);
    return d;
  }
  template <class File>
  matrix upload_head(File const&, model::tensor_view const&, host_matrix m) const {
    return upload(m);
  }

  /// This rank's rows of a head `whole` [vocab, hidden] split by vocabulary (tensor parallelism:
  /// each rank's logits are then gathered); nothing where the ranks do not divide the rows. From
  /// the file only the rank's rows are uploaded; a head already on the device (a tied embedding)
  /// is viewed in place.
  std::optional<matrix> vocab_slice(host_matrix const& whole) const {
    if (!splits_vocab(whole.rows)) return std::nullopt;
    std::int64_t const rows = whole.rows / ranks_.size;
    host_matrix part = whole;
    part.data += static_cast<std::uint64_t>(ranks_.rank * rows) * whole.row_bytes;
    part.rows = rows;
    auto m = upload(part);
    m.vocab = whole.rows;
    return m;
  }
  std::optional<matrix> vocab_slice(matrix const& whole) const {
    if (whole.vocab > 0 || !splits_vocab(whole.rows)) return std::nullopt;
    std::int64_t const rows = whole.rows / ranks_.size;
    auto const bytes = static_cast<std::size_t>(static_cast<std::uint64_t>(rows) * whole.row_bytes);
    matrix m{whole.type,
             rows,
             whole.cols,
             whole.row_bytes,
             whole.bytes.view(static_cast<std::size_t>(ranks_.rank) * bytes, bytes),
             {},
             false,
             whole.rows};
    if (blaslt_) m.plan = blaslt_->plan(m.view());
    return m;
  }
  kv_store make_kv_store(kv_shape shape, kv_layout layout) const { return {shape, layout}; }
  state_store make_state_store(std::int32_t slots, state_layout layout) const {
    return {slots, layout};
  }

  step const& begin(std::span<batch_row const> rows, kv_store const& kv, std::int64_t vocab) {
    step_.gather(rows, kv.shape(), vocab);
    return step_;
  }

  void embed(step const& s, matrix const& embd, buffer& x, float scale) {
    shape(x, s.tokens(), embd.cols);
    kernels::cuda::embed(embd.view(), s.device_tokens(), s.tokens(), scale, x.data(), stream_);
  }

  void rmsnorm(buffer const& x, vector const& w, buffer& out, float eps) {
    shape(out, x.rows, x.cols);
    kernels::cuda::rmsnorm(x.data(), w.data(), size(w), out.data(), x.rows, x.cols, x.cols, eps,
                           stream_);
  }

  void rmsnorm_heads(buffer& x, vector const& w, int head_dim, float eps) {
    kernels::cuda::rmsnorm(x.data(), w.data(), size(w), x.data(), x.rows, x.cols, head_dim, eps,
                           stream_);
  }

  void residual(buffer& x, buffer& o, vector const* post, vector const* next, float eps) {
    kernels::cuda::residual(x.data(), o.data(), post ? post->data() : nullptr,
                            next ? next->data() : nullptr, x.rows, x.cols, eps, stream_);
  }

  void add(buffer& x, buffer const& y) {
    same_size(x, y, "add");
    kernels::cuda::add(x.data(), y.data(), x.rows * x.cols, stream_);
  }

  /// x *= factor.
  void scale(buffer& x, float factor) {
    kernels::cuda::scale(x.data(), x.rows * x.cols, factor, stream_);
  }

  /// x [rows, cols] = `host` (an MTP head's input hidden states, from the host).
  void load(buffer& x, float const* host, std::int64_t rows, std::int64_t cols) {
    shape(x, rows, cols);
    cuda_parts::check(
        cudaMemcpy(x.data(), host, static_cast<std::size_t>(rows * cols) * sizeof(float),
                   cudaMemcpyHostToDevice),
        "rows to the device");
  }

  /// out = [a | b] row by row: two strided copies on the device.
  void join_columns(buffer const& a, buffer const& b, buffer& out) {
    if (a.rows != b.rows) throw error("tf: joining {} rows with {}", a.rows, b.rows);
    shape(out, a.rows, a.cols + b.cols);
    auto const pitch = static_cast<std::size_t>(out.cols) * sizeof(float);
    auto const rows = static_cast<std::size_t>(a.rows);
    for (auto [src, cols, at] :
         {std::tuple{a.data(), a.cols, std::int64_t{0}}, std::tuple{b.data(), b.cols, a.cols}})
      cuda_parts::check(
          cudaMemcpy2D(out.data() + at, pitch, src, static_cast<std::size_t>(cols) * sizeof(float),
                       static_cast<std::size_t>(cols) * sizeof(float), rows,
                       cudaMemcpyDeviceToDevice),
          "joining columns");
  }

  /// y = x w^T; a row-parallel weight's partial products are all-reduced over the ranks.
  void matmul(matrix const& w, buffer const& x, buffer& y) {
    multiply(w, x, y);
    if (w.partial_sum) reduce(y);
  }

  void matmul_group(std::initializer_list<std::pair<matrix const&, buffer&>> ws, buffer const& x) {
    for (auto const& [w, y] : ws) matmul(w, x, y);
  }

  void add_bias(buffer& y, vector const& b) {
    if (size(b) != y.cols) throw error("tf: a bias of {} over {} columns", size(b), y.cols);
    kernels::cuda::add_bias(y.data(), b.data(), y.rows, y.cols, stream_);
  }

  void rope(step const& s, buffer& x, int head_dim, rope_params p) {
    if (p.kind == rope_kind::none) return;
    int const dims = p.dims > 0 ? p.dims : head_dim;
    kernels::cuda::rope(x.data(), s.rope_table(p, dims), x.rows, x.cols / head_dim, head_dim, dims,
                        p.kind == rope_kind::neox ? kernels::cuda::rope_style::neox
                                                  : kernels::cuda::rope_style::interleaved,
                        stream_);
  }

  void kv_write(step const& s, kv_store& kv, int layer, buffer const& k, buffer const& v) {
    if (layer >= 0 && layer < kv.layout().layers && kv.layout().layer(layer).shares >= 0)
      throw error("tf: KV layer {} reads layer {}'s KV and holds none to write", layer,
                  kv.layout().layer(layer).shares);
    kernels::cuda::kv_write(kv.layer(layer), s.places(), k.data(), v.data(), s.tokens(), stream_);
  }

  void attend(step const& s, kv_store const& kv, int layer, buffer const& q, buffer& out,
              attention_params const& a) {
    auto const l = kv.layer(layer);
    if (a.head_dim != l.head_dim || q.cols != static_cast<std::int64_t>(a.heads) * a.head_dim ||
        a.kv_heads != l.kv_heads || a.heads % a.kv_heads != 0)
      throw error("tf: attention of {} heads x {} over a KV layer of {} heads x {}", a.heads,
                  a.head_dim, l.kv_heads, l.head_dim);
    shape(out, q.rows, q.cols);
    float const scale =
        a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.head_dim));
    kernels::cuda::attend(l, s.places(), q.data(), out.data(), q.rows, a.heads, scale, a.window,
                          a.softcap, stream_);
  }

  void glu(step const&, activation act, buffer& g, buffer const& u) {
    same_size(g, u, "glu");
    kernels::cuda::glu(kind(act), g.data(), u.data(), g.rows * g.cols, stream_);
  }

  void glu_merged(step const&, activation act, buffer const& gu, buffer& g) {
    std::int64_t const ff = gu.cols / 2;
    shape(g, gu.rows, ff);
    kernels::cuda::glu_merged(kind(act), gu.data(), g.data(), gu.rows, ff, stream_);
  }

  void activate(step const&, activation act, buffer& x) {
    kernels::cuda::activate(kind(act), x.data(), x.rows * x.cols, stream_);
  }

  void sigmoid_gate(buffer& x, buffer const& gate) {
    same_size(x, gate, "sigmoid gate");
    kernels::cuda::sigmoid_gate(x.data(), gate.data(), x.rows * x.cols, stream_);
  }

  void columns(buffer const& src, buffer& dst, std::int64_t first, std::int64_t count,
               std::int64_t period) {
    std::int64_t const per = column_period(src.cols, first, count, period);
    shape(dst, src.rows, src.cols / per * count);
    kernels::cuda::columns(src.data(), dst.data(), src.rows, src.cols, first, count, per, stream_);
  }

  void gated_rmsnorm(buffer& y, buffer const& z, vector const& w, int group, float eps,
                     bool norm_before_gate) {
    auto const n = size(w);
    check_gated_norm(y.cols, group, n, z.rows == y.rows && z.cols == y.cols);
    kernels::cuda::gated_rmsnorm(y.data(), z.data(), w.data(), n, y.rows, y.cols, group, eps,
                                 norm_before_gate, stream_);
  }

  void conv1d(step const& s, state_store& states, int layer, std::int64_t offset, buffer& x,
              vector const& w, vector const* bias, bool silu) {
    std::int64_t const c = x.cols;
    auto const kernel = conv1d_taps(c, size(w), bias ? size(*bias) : -1);
    std::int64_t const keep = (kernel - 1) * c;
    check_state_range(states.layout(), layer, offset, keep);
    for_each_row(s, [&](batch_row const& r, std::int64_t first, std::int64_t n) {
      kernels::cuda::conv1d(x.data() + first * c, c, n, c, w.data(), static_cast<int>(kernel),
                            bias ? bias->data() : nullptr, silu, slot(states, r, layer) + offset,
                            r.start_pos == 0, stream_);
    });
  }

  void ssm_scan(step const& s, state_store& states, int layer, std::int64_t offset,
                buffer const& xbc, buffer const& dt, vector const& dt_bias, vector const& a,
                vector const& d, ssm_params const& p, buffer& y) {
    std::int64_t const hd = p.head_dim, ds = p.state_size, nh = p.heads;
    check_ssm_scan(p, xbc.cols, dt.cols, size(dt_bias), size(a), size(d));
    if (ds > 256)
      throw error("tf: the CUDA SSM scan keeps at most 256 state entries per head, got {}", ds);
    check_state_range(states.layout(), layer, offset, nh * hd * ds);
    shape(y, xbc.rows, nh * hd);
    kernels::cuda::ssm_shape const sp{p.heads,      p.head_dim, p.groups,
                                      p.state_size, p.dt_min,   p.dt_max};
    for_each_row(s, [&](batch_row const& r, std::int64_t first, std::int64_t n) {
      kernels::cuda::ssm_scan(sp, xbc.data() + first * xbc.cols, xbc.cols,
                              dt.data() + first * dt.cols, dt.cols, dt_bias.data(), a.data(),
                              d.data(), n, slot(states, r, layer) + offset, r.start_pos == 0,
                              y.data() + first * y.cols, y.cols, stream_);
    });
  }

  void gated_delta(step const& s, state_store& states, int layer, std::int64_t offset,
                   buffer const& qkv, buffer const& b, buffer const& a, vector const& dt_bias,
                   vector const& a_coef, delta_params const& p, buffer& out) {
    std::int64_t const nv = p.v_heads, dk = p.k_dim, dv = p.v_dim;
    check_gated_delta(p, qkv.cols, b.cols, a.cols, size(dt_bias), size(a_coef));
    check_state_range(states.layout(), layer, offset, nv * dk * dv);
    shape(out, qkv.rows, nv * dv);
    kernels::cuda::delta_shape const dp{p.k_heads, p.v_heads, p.k_dim,
                                        p.v_dim,   p.tiled,   p.norm_eps};
    for_each_row(s, [&](batch_row const& r, std::int64_t first, std::int64_t n) {
      kernels::cuda::gated_delta(dp, qkv.data() + first * qkv.cols, qkv.cols, b.data() + first * nv,
                                 a.data() + first * nv, nv, dt_bias.data(), a_coef.data(), n,
                                 slot(states, r, layer) + offset, r.start_pos == 0,
                                 out.data() + first * out.cols, out.cols, stream_);
    });
  }

  /// The MoE layer as the CPU backend runs it: the router on the device, the picks on the host
  /// (backend::route, the CPU backend's too, so both choose alike), each chosen expert once
  /// over the rows that chose it, the picks summed per token in pick order.
  void moe(step const& s, routing_params const& r, matrix const& router, vector const& bias,
           std::span<expert const> experts, expert const* shared, matrix const* shared_gate,
           buffer const& xn, buffer& out, matrix const* latent_down = nullptr,
           matrix const* latent_up = nullptr) {
    (void)s;
    if (static_cast<int>(experts.size()) != r.experts)
      throw error("tf: MoE layer has {} experts, its routing {}", experts.size(), r.experts);
    if ((latent_down == nullptr) != (latent_up == nullptr))
      throw error("tf: a latent MoE needs both projections");
    std::int64_t const n = xn.rows, hidden = xn.cols, K = r.k;
    shape(out, n, hidden);
    matmul(router, xn, moe_.logits);
    std::vector<float> logits(static_cast<std::size_t>(n * r.experts));
    download(moe_.logits, logits);
    std::vector<std::int32_t> pick(static_cast<std::size_t>(n * K));
    std::vector<float> weight(pick.size());
    for (std::int64_t t = 0; t < n; ++t)
      route(r, logits.data() + t * r.experts, bias.empty() ? nullptr : bias.host.data(),
            pick.data() + t * K, weight.data() + t * K);
    if (record_routes_) routes_.push_back(pick);
    buffer const* ex = &xn;
    if (latent_down) {
      matmul(*latent_down, xn, moe_.lx);
      ex = &moe_.lx;
    }
    std::int64_t const width = ex->cols;
    shape(moe_.results, n * K, width);
    std::vector<std::int64_t> rows_of, picks_of;
    for (std::size_t e = 0; e < experts.size(); ++e) {
      rows_of.clear();
      picks_of.clear();
      for (std::size_t i = 0; i < pick.size(); ++i)
        if (static_cast<std::size_t>(pick[i]) == e) {
          picks_of.push_back(static_cast<std::int64_t>(i));
          rows_of.push_back(static_cast<std::int64_t>(i) / K);
        }
      if (picks_of.empty()) continue;
      if (experts[e].down.rows != width)
        throw error("tf: MoE expert {} writes {} values, the layer wants {}", e,
                    experts[e].down.rows, width);
      auto const m = static_cast<std::int64_t>(picks_of.size());
      moe_.idx.upload(rows_of.data(), rows_of.size());
      shape(moe_.xb, m, width);
      kernels::cuda::gather_rows(ex->data(), moe_.idx.data(), m, width, moe_.xb.data(), stream_);
      run_expert(experts[e], r.act, moe_.xb, moe_.y);
      moe_.idx.upload(picks_of.data(), picks_of.size());
      kernels::cuda::scatter_rows(moe_.y.data(), moe_.idx.data(), m, width, moe_.results.data(),
                                  stream_);
    }
    moe_.weight.upload(weight.data(), weight.size());
    buffer& routed = latent_up ? moe_.lsum : out;
    shape(routed, n, width);
    kernels::cuda::moe_combine(moe_.results.data(), moe_.weight.data(), n, static_cast<int>(K),
                               width, routed.data(), stream_);
    if (latent_up) matmul(*latent_up, moe_.lsum, out);
    if (shared) {
      run_expert(*shared, r.act, xn, moe_.sh);
      float const* gate = nullptr;
      if (shared_gate) {
        matmul(*shared_gate, xn, moe_.gate);
        gate = moe_.gate.data();
      }
      kernels::cuda::add_scaled(out.data(), moe_.sh.data(), gate, n, hidden, stream_);
    }
    reduce_partial_moe(experts, shared, out);
  }

  /// Logits [logit tokens, vocab] into host memory (a null `logits` leaves them on the device for
  /// sample_rows): the final RMSNorm of the tokens that want them, the head, then the softcap.
  void logits(step const& s, buffer const& x, vector const& norm, matrix const& head, float eps,
              float softcap, float* logits) {
    auto const m = static_cast<std::int64_t>(s.logit_tokens().size());
    shape(head_in_, m, x.cols);
    kernels::cuda::gather_rows(x.data(), s.device_logit_rows(), m, x.cols, head_in_.data(),
                               stream_);
    kernels::cuda::rmsnorm(head_in_.data(), norm.data(), size(norm), head_in_.data(), m, x.cols,
                           x.cols, eps, stream_);
    if (head.vocab > 0)
      gathered_logits(head, m);
    else
      matmul(head, head_in_, head_out_);
    if (softcap > 0.0f)
      kernels::cuda::softcap(head_out_.data(), m * head_out_.cols, softcap, stream_);
    if (hidden_out_) {
      // Every token's hidden state after the final norm (what the head reads), for an MTP head.
      shape(hidden_, x.rows, x.cols);
      kernels::cuda::rmsnorm(x.data(), norm.data(), size(norm), hidden_.data(), x.rows, x.cols,
                             x.cols, eps, stream_);
      download(hidden_, hidden_out_, static_cast<std::size_t>(x.rows * x.cols));
    }
    if (!logits) return;
    cuda_parts::check(cudaMemcpy(logits, head_out_.data(),
                                 static_cast<std::size_t>(m * head_out_.cols) * sizeof(float),
                                 cudaMemcpyDeviceToHost),
                      "logits copy to the host");
  }

  /// Samples each logit row the last logits() left on the device (rows[i] for row i, their
  /// adjustments indexing `adjust`): only the tokens and logprobs come back (the capability
  /// tf::backend::device_sampling detects).
  void sample_rows(std::span<kernels::portable::sample_math::row_params const> rows,
                   std::span<kernels::portable::sample_math::logit_adjust const> adjust,
                   std::span<kernels::portable::sample_math::row_result> out) {
    sampler_.run(head_out_.data(), head_out_.rows, head_out_.cols, rows, adjust, out, stream_);
  }

  void record_routes(bool on) { record_routes_ = on; }
  void clear_routes() { routes_.clear(); }
  std::vector<std::vector<std::int32_t>> const& routes() const { return routes_; }
  /// While set, logits() also writes every token's final hidden state [tokens, hidden] to `out`
  /// on the host (what an MTP head reads); null stops it.
  void capture_hidden(float* out) { hidden_out_ = out; }

 private:
  struct moe_scratch {
    buffer logits, lx, xb, y, g, u, results, lsum, sh, gate;
    cuda_parts::device_array<std::int64_t> idx;
    cuda_parts::device_array<float> weight;
  };

  static void shape(buffer& b, std::int64_t rows, std::int64_t cols) {
    b.rows = rows;
    b.cols = cols;
    b.values.resize(static_cast<std::size_t>(rows * cols));
  }
  static std::int64_t size(vector const& v) { return static_cast<std::int64_t>(v.size()); }
  static void same_size(buffer const& x, buffer const& y, char const* what) {
    if (x.rows * x.cols != y.rows * y.cols)
      throw error("tf: {} of {} x {} and {} x {} values", what, x.rows, x.cols, y.rows, y.cols);
  }
  static kernels::cuda::act_kind kind(activation a) {
    switch (a) {
      case activation::gelu_tanh:
        return kernels::cuda::act_kind::gelu_tanh;
      case activation::silu:
        return kernels::cuda::act_kind::silu;
      case activation::relu2:
        return kernels::cuda::act_kind::relu2;
    }
    return kernels::cuda::act_kind::silu;
  }
  static void download(buffer const& b, std::vector<float>& host) {
    download(b, host.data(), host.size());
  }
  static void download(buffer const& b, float* host, std::size_t n) {
    cuda_parts::check(cudaMemcpy(host, b.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
                      "copy to the host");
  }

  // y = x w^T on this rank's slice of w, without the all-reduce.
  void multiply(matrix const& w, buffer const& x, buffer& y) {
    if (x.cols != w.cols)
      throw error("tf: a matmul of {} x {} weights over rows of {}", w.rows, w.cols, x.cols);
    shape(y, x.rows, w.rows);
    if (w.plan)
      blaslt_->run(*w.plan, w.view(), x.data(), y.data(), x.rows, stream_);
    else
      kernels::cuda::matmul(w.view(), x.data(), y.data(), x.rows, stream_);
  }

  // Whether the ranks can split a head of `rows` vocabulary rows (each gathers the others' logits).
  bool splits_vocab(std::int64_t rows) const {
    return ranks_.split() && ranks_.all_gather && rows % ranks_.size == 0;
  }

  // This rank's rows of a head split by vocabulary, then every rank's, into head_out_ [m, vocab].
  void gathered_logits(matrix const& head, std::int64_t m) {
    multiply(head, head_in_, head_part_);
    shape(head_all_, m * ranks_.size, head.rows);
    cuda_parts::check(cudaStreamSynchronize(stream_), "the stream before an all-gather");
    auto const mine = static_cast<std::size_t>(m * head.rows);
    ranks_.all_gather(
        std::span<float const>(head_part_.data(), mine),
        std::span<float>(head_all_.data(), mine * static_cast<std::size_t>(ranks_.size)));
    shape(head_out_, m, head.vocab);
    auto const row = static_cast<std::size_t>(head.rows) * sizeof(float);
    for (int r = 0; r < ranks_.size; ++r)
      cuda_parts::check(cudaMemcpy2D(head_out_.data() + static_cast<std::int64_t>(r) * head.rows,
                                     static_cast<std::size_t>(head.vocab) * sizeof(float),
                                     head_all_.data() + static_cast<std::size_t>(r) * mine, row,
                                     row, static_cast<std::size_t>(m), cudaMemcpyDeviceToDevice),
                        "the gathered logits' copy");
  }

  // The rank-order sum of every rank's partial y, the same bits on every rank. The collectives
  // run on the communicator's own stream, so this stream's work on y finishes first.
  void reduce(buffer& y) {
    if (!ranks_.split()) return;
    cuda_parts::check(cudaStreamSynchronize(stream_), "the stream before an all-reduce");
    ranks_.all_reduce_sum(std::span<float>(y.data(), static_cast<std::size_t>(y.rows * y.cols)));
  }

  // Experts split over the ranks give partial sums (the routed sum, its latent projection and
  // the shared expert are linear in them): one all-reduce for the layer.
  void reduce_partial_moe(std::span<expert const> experts, expert const* shared, buffer& out) {
    if ((!experts.empty() && experts.front().down.partial_sum) ||
        (shared && shared->down.partial_sum))
      reduce(out);
  }

  // down(act(gate x) * up x), or down(act(up x)) without a gate: this rank's part of it.
  void run_expert(expert const& e, activation act, buffer const& x, buffer& y) {
    if (e.gate.empty()) {
      multiply(e.up, x, moe_.u);
      kernels::cuda::activate(kind(act), moe_.u.data(), moe_.u.rows * moe_.u.cols, stream_);
      multiply(e.down, moe_.u, y);
      return;
    }
    multiply(e.gate, x, moe_.g);
    multiply(e.up, x, moe_.u);
    kernels::cuda::glu(kind(act), moe_.g.data(), moe_.u.data(), moe_.g.rows * moe_.g.cols, stream_);
    multiply(e.down, moe_.g, y);
  }

  static float* slot(state_store& states, batch_row const& r, int layer) {
    if (r.state_slot < 0) throw error("tf: a batch row has no state slot");
    return states.at(r.state_slot, layer);
  }

  cuda_parts::device_info device_;
  dist::tensor_parallel ranks_;
  mutable std::uint64_t uploaded_ = 0;          // uploads are const: binding tallies what it copied
  std::shared_ptr<cuda_parts::blaslt> blaslt_;  // null for cuda_matmul::own
  kernels::cuda::stream_t stream_ = nullptr;    // the legacy default stream: in order with copies
  step step_;
  buffer head_in_, head_out_, hidden_;
  buffer head_part_, head_all_;  // a vocabulary-split head's logits: this rank's, every rank's
  float* hidden_out_ = nullptr;  // capture_hidden's target
  cuda_parts::device_sampler sampler_;
  moe_scratch moe_;
  bool record_routes_ = false;
  std::vector<std::vector<std::int32_t>> routes_;
};

static_assert(backend<cuda>);

}  // namespace tf::backend
