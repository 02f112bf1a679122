#pragma once
/// The CPU backend: the backend concept's operations over kernels/cpu, on host memory, across a
/// persistent thread pool. Each output element is summed in one fixed order, so a row's results do
/// not depend on the batch or the thread count.
#include <kernels/cpu/kv_rows.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <kernels/cpu/vec_math.hpp>
#include <tf/backend/backend.hpp>
#include <tf/backend/cpu/kv_store.hpp>
#include <tf/backend/cpu/math.hpp>
#include <tf/backend/cpu/matrix.hpp>
#include <tf/backend/cpu/moe.hpp>
#include <tf/backend/cpu/recurrent.hpp>
#include <tf/backend/cpu/state_store.hpp>
#include <tf/backend/host_matrix.hpp>
#include <tf/backend/host_step.hpp>
#include <tf/backend/store_checks.hpp>
#include <tf/dist/tensor_parallel.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::backend {

/// A weight matrix as a file holds it, in host memory: what binders describe for every backend.

/// The CPU backend's settings.
struct cpu_options {
  int threads = 1;                // workers in the pool, the caller included
  dist::tensor_parallel ranks{};  // the ranks the weights are split over (one by default)
};

class cpu {
 public:
  static constexpr std::string_view name = "cpu";
  static constexpr memory_kind memory = memory_kind::host;

  using options = cpu_options;
  using matrix = cpu_parts::matrix;
  using vector = std::vector<float>;
  using step = host_step;
  using kv_store = cpu_parts::kv_store;
  using state_store = cpu_parts::state_store;
  using expert = cpu_parts::expert;
  /// An activation [rows, cols] in f32.
  struct buffer {
    std::vector<float> data;
    std::int64_t rows = 0, cols = 0;
  };

  explicit cpu(options o = {}) {
    if (o.threads < 1 || o.threads > 1024)
      throw error("tf: the CPU backend wants 1..1024 threads, got {}", o.threads);
    pool_ = std::make_unique<kernels::cpu::thread_pool>(o.threads);
    dist::check_ranks_for(o.ranks, "CPU", dist::memory_space::host, "an MPI communicator");
    ranks_ = std::move(o.ranks);
  }

  int threads() const { return pool_->size(); }
  /// The ranks the weights are split over (tensor parallelism; one rank by default).
  dist::tensor_parallel const& ranks() const { return ranks_; }

  // Binding: host weights become the backend's (on the CPU they stay where the file has them).
  matrix upload(host_matrix m) const {
    tally(m, false);
    return m;
  }
  /// A matrix in `bytes` (a rank's slice the binder copied): kept as long as the backend.
  matrix upload_owned(std::vector<std::byte> bytes, host_matrix m) {
    m.data = owned_.emplace_back(std::move(bytes)).data();
    tally(m, true);
    return m;
  }
  vector upload(std::vector<float> v) const {
    copied_bytes_ += v.size() * sizeof(float);
    return v;
  }
  /// The embedding or head: regrouped for the one-row matvec where cpu_parts::in_rows8 can.
  template <class File>
  matrix upload_head(File const& file, model::tensor_view const& t, host_matrix m) const {
    auto out = cpu_parts::in_rows8(file, t, m);
    tally(out, false);
    return out;
  }

  /// This rank's equal share of the rows of the head `whole`, whose logits every rank computes a
  /// slice of and gathers (tensor parallelism over the vocabulary); nothing where the ranks do not
  /// split, cannot gather, or the rows do not divide over them (eight-row groups in rows8).
  std::optional<matrix> vocab_slice(matrix const& whole) const {
    std::int64_t const rows = whole.rows / ranks_.size;
    std::int64_t const group = whole.layout == kernels::cpu::weight_layout::rows8 ? 8 : 1;
    if (!ranks_.split() || !ranks_.all_gather || whole.vocab > 0 || whole.rows % ranks_.size != 0 ||
        rows % group != 0)
      return std::nullopt;
    matrix m = whole;
    m.data += static_cast<std::uint64_t>(ranks_.rank * rows) * whole.row_bytes;
    m.rows = rows;
    m.vocab = whole.rows;
    tally(m, false);
    return m;
  }

  /// The weights bound to this backend: the bytes of every distinct matrix and vector, and of
  /// those the bytes copied at the bind (in memory from then on; a view of a mapped file is read
  /// on first use). Under tensor parallelism, this rank's share.
  struct bound_weights {
    std::uint64_t bytes = 0;
    std::uint64_t copied_bytes = 0;
  };
  bound_weights weights_bound() const {
    // Views may overlap (a tied head is its embedding; a rank's head rows lie inside it).
    auto v = views_;
    std::sort(v.begin(), v.end());
    std::uint64_t bytes = 0;
    std::uintptr_t end = 0;
    for (auto const& [first, last] : v) {
      auto const from = std::max(first, end);
      if (last > from) bytes += last - from;
      end = std::max(end, last);
    }
    return {bytes + copied_bytes_, copied_bytes_};
  }
  kv_store make_kv_store(kv_shape shape, kv_layout layout) const { return {shape, layout}; }
  state_store make_state_store(std::int32_t slots, state_layout layout) const {
    return {slots, layout};
  }

  /// Checks and gathers `rows` for a forward over `kv`.
  step const& begin(std::span<batch_row const> rows, kv_store const& kv, std::int64_t vocab) {
    step_.gather(rows, kv.shape(), vocab);
    return step_;
  }

  /// x[t] = scale * the embedding row of token t.
  void embed(step const& s, matrix const& embd, buffer& x, float scale) {
    std::int64_t const n = s.tokens(), h = embd.cols;
    shape(x, n, h);
    pool_->parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        float* xt = x.data.data() + t * h;
        embd.dequantize_row(s.token(t), xt);
        if (scale != 1.0f)
          for (std::int64_t i = 0; i < h; ++i) xt[i] *= scale;
      }
    });
  }

  /// out[t] = rmsnorm(x[t]) * w.
  void rmsnorm(buffer const& x, vector const& w, buffer& out, float eps) {
    shape(out, x.rows, x.cols);
    per_row(x.rows, [&](std::int64_t t) {
      cpu_parts::rmsnorm(row(x, t), w.data(), row(out, t), x.cols, eps);
    });
  }

  /// RMSNorm of every head of `head_dim` in x, in place, with the per-head weights w [head_dim].
  void rmsnorm_heads(buffer& x, vector const& w, int head_dim, float eps) {
    std::int64_t const heads = x.cols / head_dim;
    per_row(x.rows, [&](std::int64_t t) {
      for (std::int64_t h = 0; h < heads; ++h) {
        float* xh = row(x, t) + h * head_dim;
        cpu_parts::rmsnorm(xh, w.data(), xh, head_dim, eps);
      }
    });
  }

  /// The residual step: o = rmsnorm(o) * post when post is given; x += o; then o = rmsnorm(x) *
  /// next when next is given (the next block's input).
  void residual(buffer& x, buffer& o, vector const* post, vector const* next, float eps) {
    std::int64_t const h = x.cols;
    per_row(x.rows, [&](std::int64_t t) {
      float* xt = row(x, t);
      float* ot = row(o, t);
      if (post) cpu_parts::rmsnorm(ot, post->data(), ot, h, eps);
      for (std::int64_t i = 0; i < h; ++i) xt[i] += ot[i];
      if (next) cpu_parts::rmsnorm(xt, next->data(), ot, h, eps);
    });
  }

  /// x += y.
  void add(buffer& x, buffer const& y) {
    for (std::size_t i = 0; i < x.data.size(); ++i) x.data[i] += y.data[i];
  }

  /// x *= factor.
  void scale(buffer& x, float factor) {
    for (auto& e : x.data) e *= factor;
  }

  /// y = x w^T.
  /// x [rows, cols] = `host` (an MTP head's input hidden states).
  void load(buffer& x, float const* host, std::int64_t rows, std::int64_t cols) {
    shape(x, rows, cols);
    std::copy_n(host, rows * cols, x.data.data());
  }

  /// out = [a | b] row by row.
  void join_columns(buffer const& a, buffer const& b, buffer& out) {
    if (a.rows != b.rows) throw error("tf: joining {} rows with {}", a.rows, b.rows);
    shape(out, a.rows, a.cols + b.cols);
    for (std::int64_t t = 0; t < a.rows; ++t) {
      std::copy_n(row(a, t), a.cols, row(out, t));
      std::copy_n(row(b, t), b.cols, row(out, t) + a.cols);
    }
  }

  void matmul(matrix const& w, buffer const& x, buffer& y) {
    shape(y, x.rows, w.rows);
    cpu_parts::matmul(*pool_, w, x.data.data(), y.data.data(), x.rows);
    if (w.partial_sum) reduce(y);
  }

  /// y_i = x w_i^T for matrices reading the same x, in one pass over the pool for one token.
  void matmul_group(std::initializer_list<std::pair<matrix const&, buffer&>> ws, buffer const& x) {
    std::pair<matrix const*, float*> ps[4];
    std::size_t n = 0;
    for (auto const& [w, y] : ws) {
      if (n == 4) throw error("tf: matmul_group takes at most 4 matrices");
      shape(y, x.rows, w.rows);
      ps[n++] = {&w, y.data.data()};
    }
    cpu_parts::matmul_group(*pool_, std::span(ps, n), x.data.data(), x.rows);
    for (auto const& [w, y] : ws)
      if (w.partial_sum) reduce(y);
  }

  /// y[t] += b.
  void add_bias(buffer& y, vector const& b) {
    for (std::int64_t t = 0; t < y.rows; ++t)
      for (std::int64_t i = 0; i < y.cols; ++i) row(y, t)[i] += b[static_cast<std::size_t>(i)];
  }

  /// RoPE in place on every head of `head_dim` in x at its token's position.
  void rope(step const& s, buffer& x, int head_dim, rope_params p) {
    if (p.kind == rope_kind::none) return;
    int const dims = p.dims > 0 ? p.dims : head_dim;
    auto const& cs = s.rope_table(p, dims);
    std::int64_t const heads = x.cols / head_dim;
    per_row(x.rows, [&](std::int64_t t) {
      float const* c = cs.data() + t * dims;
      for (std::int64_t h = 0; h < heads; ++h) {
        float* xh = row(x, t) + h * head_dim;
        if (p.kind == rope_kind::neox)
          kernels::cpu::vec_math::rope_rotate(xh, dims / 2, c, c + dims / 2);
        else
          cpu_parts::rope_interleaved_apply(xh, dims / 2, c, c + dims / 2);
      }
    });
  }

  /// Writes every token's K and V rows at its position in `layer`'s pages.
  void kv_write(step const& s, kv_store& kv, int layer, buffer const& k, buffer const& v) {
    per_row(s.tokens(), [&](std::int64_t t) { kv.store(s, layer, t, row(k, t), row(v, t)); });
  }

  /// out = attention of q over `layer`'s pages (see attention_params).
  void attend(step const& s, kv_store const& kv, int layer, buffer const& q, buffer& out,
              attention_params const& a) {
    shape(out, q.rows, q.cols);
    kv.attend(*pool_, s, layer, q.data.data(), out.data.data(), a);
  }

  /// g = act(g) * u.
  void glu(step const& s, activation act, buffer& g, buffer const& u) {
    bool const f16 = s.f16_numerics();
    std::int64_t const ff = g.cols;
    pool_->parallel_for(g.rows, [&](std::int64_t t0, std::int64_t t1) {
      glu_run(act, f16, g.data.data() + t0 * ff, u.data.data() + t0 * ff, (t1 - t0) * ff);
    });
  }

  /// g = act(gu[:, :ff]) * gu[:, ff:], for a merged gate|up projection gu [n, 2 ff].
  void glu_merged(step const& s, activation act, buffer const& gu, buffer& g) {
    std::int64_t const ff = gu.cols / 2;
    shape(g, gu.rows, ff);
    bool const f16 = s.f16_numerics();
    per_row(gu.rows, [&](std::int64_t t) {
      float* gt = row(g, t);
      std::copy_n(row(gu, t), ff, gt);
      glu_run(act, f16, gt, row(gu, t) + ff, ff);
    });
  }

  /// out = the MoE layer's experts (and shared expert, scaled by sigmoid(shared_gate xn) when
  /// given) over xn, the experts in the latent width when given; see cpu_parts::run_moe.
  void moe(step const& s, routing_params const& r, matrix const& router, vector const& bias,
           std::span<expert const> experts, expert const* shared, matrix const* shared_gate,
           buffer const& xn, buffer& out, matrix const* latent_down = nullptr,
           matrix const* latent_up = nullptr) {
    shape(out, xn.rows, xn.cols);
    bool const f16 = s.f16_numerics();
    cpu_parts::run_moe(
        *pool_, r, router, bias.empty() ? nullptr : bias.data(), experts, shared, shared_gate,
        latent_down, latent_up, xn.data.data(), xn.rows, out.data.data(),
        [&](float* g, float const* u, std::int64_t n) { glu_run(r.act, f16, g, u, n); },
        [&](float* u, std::int64_t n) { act_run(r.act, f16, u, n); }, moe_);
    // Experts split over the ranks give partial sums (the routed sum is linear in them): one
    // all-reduce for the layer.
    if ((!experts.empty() && experts.front().down.partial_sum) ||
        (shared && shared->down.partial_sum))
      reduce(out);
    if (record_routes_) routes_.push_back(moe_.pick);
  }

  /// Logits [logit tokens, vocab] into `logits`: the final RMSNorm of the tokens that want them,
  /// the head, then softcap * tanh(l / softcap) when softcap > 0.
  void logits(step const& s, buffer const& x, vector const& norm, matrix const& head, float eps,
              float softcap, float* logits) {
    auto const out = s.logit_tokens();
    auto const m = static_cast<std::int64_t>(out.size());
    std::int64_t const h = x.cols;
    head_in_.resize(static_cast<std::size_t>(m * h));
    for (std::int64_t i = 0; i < m; ++i)
      cpu_parts::rmsnorm(row(x, out[static_cast<std::size_t>(i)]), norm.data(),
                         head_in_.data() + i * h, h, eps);
    if (head.vocab > 0)
      gathered_logits(head, m, logits);
    else
      cpu_parts::matmul(*pool_, head, head_in_.data(), logits, m);
    if (hidden_out_)
      per_row(x.rows, [&](std::int64_t t) {
        cpu_parts::rmsnorm(row(x, t), norm.data(), hidden_out_ + t * h, h, eps);
      });
    if (softcap > 0.0f) {
      constexpr std::int64_t chunk = 8192;
      std::int64_t const total = m * (head.vocab > 0 ? head.vocab : head.rows);
      pool_->parallel_for((total + chunk - 1) / chunk, [&](std::int64_t c0, std::int64_t c1) {
        std::int64_t const end = std::min(total, c1 * chunk);
        kernels::cpu::vec_math::softcap(logits + c0 * chunk, end - c0 * chunk, softcap);
      });
    }
  }

  /// Until the next call, logits() also writes every token's final hidden state (the output
  /// norm of the residual stream: what the head reads) [tokens, hidden] to `out`; null: none.
  /// MTP heads read it; the logits do not change.
  void capture_hidden(float* out) { hidden_out_ = out; }

  /// x = act(x) in place (an MLP without a gate: down(act(up x))).
  void activate(step const& s, activation act, buffer& x) {
    bool const f16 = s.f16_numerics();
    pool_->parallel_for(x.rows, [&](std::int64_t t0, std::int64_t t1) {
      act_run(act, f16, x.data.data() + t0 * x.cols, (t1 - t0) * x.cols);
    });
  }

  /// x *= sigmoid(gate), elementwise.
  void sigmoid_gate(buffer& x, buffer const& gate) {
    if (gate.data.size() != x.data.size())
      throw error("tf: a sigmoid gate of {} values over {}", gate.data.size(), x.data.size());
    for (std::size_t i = 0; i < x.data.size(); ++i) x.data[i] *= cpu_parts::sigmoid(gate.data[i]);
  }

  /// dst = columns [first, first + count) of src; with period > 0, of each period-wide group of
  /// src's columns, side by side (a per-head slice of interleaved heads).
  void columns(buffer const& src, buffer& dst, std::int64_t first, std::int64_t count,
               std::int64_t period) {
    std::int64_t const per = column_period(src.cols, first, count, period);
    std::int64_t const groups = src.cols / per;
    shape(dst, src.rows, groups * count);
    per_row(src.rows, [&](std::int64_t t) {
      for (std::int64_t g = 0; g < groups; ++g)
        std::copy_n(row(src, t) + g * per + first, count, row(dst, t) + g * count);
    });
  }

  /// The gated grouped RMSNorm over groups of `group` columns, with weights w [cols] or [group]:
  /// norm_before_gate: y = rmsnorm(y) * w * silu(z) (Qwen3.5); else y = rmsnorm(y * silu(z)) * w
  /// (Mamba2).
  void gated_rmsnorm(buffer& y, buffer const& z, vector const& w, int group, float eps,
                     bool norm_before_gate) {
    auto const n = static_cast<std::int64_t>(w.size());
    check_gated_norm(y.cols, group, n, z.data.size() == y.data.size());
    per_row(y.rows, [&](std::int64_t t) {
      float* yt = row(y, t);
      float const* zt = row(z, t);
      if (!norm_before_gate)
        for (std::int64_t i = 0; i < y.cols; ++i) yt[i] *= cpu_parts::silu(zt[i]);
      for (std::int64_t g0 = 0; g0 < y.cols; g0 += group) {
        float const* wg = w.data() + (n == group ? 0 : g0);
        cpu_parts::rmsnorm(yt + g0, wg, yt + g0, group, eps);
      }
      if (norm_before_gate)
        for (std::int64_t i = 0; i < y.cols; ++i) yt[i] *= cpu_parts::silu(zt[i]);
    });
  }

  /// The causal depthwise conv1d over each row's tokens, in place on x [n, channels], with w
  /// [channels, K] (oldest tap first), an optional bias and silu after. The K - 1 inputs before a
  /// row's first token are kept in its state slot for recurrent layer `layer`, from float
  /// `offset` ((K - 1) * channels floats; zero at position 0).
  void conv1d(step const& s, state_store& states, int layer, std::int64_t offset, buffer& x,
              vector const& w, vector const* bias, bool silu) {
    std::int64_t const c = x.cols;
    auto const kernel = conv1d_taps(c, static_cast<std::int64_t>(w.size()),
                                    bias ? static_cast<std::int64_t>(bias->size()) : -1);
    std::int64_t const keep = (kernel - 1) * c;
    check_state_range(states.layout(), layer, offset, keep);
    for_each_row(s, [&](batch_row const& r, std::int64_t first, std::int64_t n) {
      float* window = slot(states, r, layer, offset, keep);
      pool_->parallel_for(c, [&](std::int64_t c0, std::int64_t c1) {
        cpu_parts::conv1d_channels(row(x, first), n, c, c, w.data(), bias ? bias->data() : nullptr,
                                   static_cast<int>(kernel), silu, window, c0, c1);
      });
    });
  }

  /// The Mamba2 selective scan over each row's tokens: xbc [n, heads * head_dim + 2 * groups *
  /// state_size] (x | B | C, after the conv), dt [n, heads] raw; per head dt = clamp(softplus(dt
  /// + dt_bias)), h = exp(dt a) h + dt x B, y = C . h + d x. The state [heads, head_dim,
  /// state_size] lives in the row's slot for `layer` from float `offset` (zero at position 0).
  void ssm_scan(step const& s, state_store& states, int layer, std::int64_t offset,
                buffer const& xbc, buffer const& dt, vector const& dt_bias, vector const& a,
                vector const& d, ssm_params const& p, buffer& y) {
    std::int64_t const hd = p.head_dim, ds = p.state_size, nh = p.heads;
    check_ssm_scan(p, xbc.cols, dt.cols, static_cast<std::int64_t>(dt_bias.size()),
                   static_cast<std::int64_t>(a.size()), static_cast<std::int64_t>(d.size()));
    std::int64_t const floats = nh * hd * ds;
    check_state_range(states.layout(), layer, offset, floats);
    shape(y, xbc.rows, nh * hd);
    for_each_row(s, [&](batch_row const& r, std::int64_t first, std::int64_t n) {
      float* state = slot(states, r, layer, offset, floats);
      pool_->parallel_for(nh, [&](std::int64_t h0, std::int64_t h1) {
        for (std::int64_t h = h0; h < h1; ++h) {
          auto const i = static_cast<std::size_t>(h);
          cpu_parts::ssm_scan_head(p, static_cast<int>(h), row(xbc, first), xbc.cols,
                                   row(dt, first), dt.cols, dt_bias[i], a[i], d[i], n,
                                   state + h * hd * ds, row(y, first), y.cols);
        }
      });
    });
  }

  /// The gated delta rule over each row's tokens: qkv [n, 2 k_heads k_dim + v_heads v_dim] (q | k
  /// | v, after the conv), b and a [n, v_heads] raw. Per value head: q, k L2-normalised (q times
  /// k_dim^-1/2), beta = sigmoid(b), decay = exp(a_coef softplus(a + dt_bias)); S = decay S;
  /// S += k (beta (v - S^T k))^T; out = S^T q. The state [v_heads, k_dim, v_dim] lives in the
  /// row's slot for `layer` from float `offset` (zero at position 0).
  void gated_delta(step const& s, state_store& states, int layer, std::int64_t offset,
                   buffer const& qkv, buffer const& b, buffer const& a, vector const& dt_bias,
                   vector const& a_coef, delta_params const& p, buffer& out) {
    std::int64_t const nv = p.v_heads, dk = p.k_dim, dv = p.v_dim;
    check_gated_delta(p, qkv.cols, b.cols, a.cols, static_cast<std::int64_t>(dt_bias.size()),
                      static_cast<std::int64_t>(a_coef.size()));
    std::int64_t const floats = nv * dk * dv;
    check_state_range(states.layout(), layer, offset, floats);
    shape(out, qkv.rows, nv * dv);
    for_each_row(s, [&](batch_row const& r, std::int64_t first, std::int64_t n) {
      float* state = slot(states, r, layer, offset, floats);
      pool_->parallel_for(nv, [&](std::int64_t j0, std::int64_t j1) {
        for (std::int64_t j = j0; j < j1; ++j) {
          auto const i = static_cast<std::size_t>(j);
          cpu_parts::gated_delta_head(p, static_cast<int>(j), row(qkv, first), qkv.cols,
                                      row(b, first), row(a, first), dt_bias[i], a_coef[i], n,
                                      state + j * dk * dv, row(out, first));
        }
      });
    });
  }

  /// The diagonal linear recurrence h = decay * h + x over each row's tokens in order, in place
  /// (x[t] becomes h after token t); h lives in the row's state slot for recurrent layer
  /// `layer` and starts from zero at position 0.
  void linear_recurrence(step const& s, state_store& states, int layer, buffer& x,
                         vector const& decay) {
    std::int64_t const d = x.cols;
    if (static_cast<std::int64_t>(decay.size()) != d || states.layout().floats != d)
      throw error("tf: a recurrence of width {} with {} decays over states of {}", d, decay.size(),
                  states.layout().floats);
    for_each_row(s, [&](batch_row const& r, std::int64_t first, std::int64_t n) {
      float* h = slot(states, r, layer, 0, d);
      for (std::int64_t t = first; t < first + n; ++t) {
        float* xt = row(x, t);
        for (std::int64_t i = 0; i < d; ++i)
          xt[i] = h[i] = decay[static_cast<std::size_t>(i)] * h[i] + xt[i];
      }
    });
  }

  /// When on, moe() keeps each call's picks: routes()[m][t * k + j] is token t's j-th expert in
  /// the m-th MoE call since the last clear_routes().
  void record_routes(bool on) { record_routes_ = on; }
  void clear_routes() { routes_.clear(); }
  std::vector<std::vector<std::int32_t>> const& routes() const { return routes_; }

 private:
  // The rank-order sum of every rank's partial y, the same bits on every rank.
  void reduce(buffer& y) {
    if (ranks_.split()) ranks_.all_reduce_sum(std::span<float>(y.data));
  }

  static void shape(buffer& b, std::int64_t rows, std::int64_t cols) {
    b.rows = rows;
    b.cols = cols;
    b.data.resize(static_cast<std::size_t>(rows * cols));
  }
  static float* row(buffer& b, std::int64_t t) { return b.data.data() + t * b.cols; }
  static float const* row(buffer const& b, std::int64_t t) { return b.data.data() + t * b.cols; }

  // A row's state for `layer` from `offset`, zeroed when the row starts the stream.
  static float* slot(state_store& states, batch_row const& r, int layer, std::int64_t offset,
                     std::int64_t floats) {
    if (r.state_slot < 0) throw error("tf: a batch row has no state slot");
    float* p = states.at(r.state_slot, layer) + offset;
    if (r.start_pos == 0) std::fill_n(p, floats, 0.0f);
    return p;
  }

  template <class Fn>
  void per_row(std::int64_t n, Fn&& fn) {
    pool_->parallel_for(n, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) fn(t);
    });
  }

  // GeGLU as llama.cpp's f16 path rounds it: by table, built once per process.
  static kernels::cpu::kv_rows::gelu_f16_table<cpu_parts::gelu_tanh> const& gelu_f16() {
    static kernels::cpu::kv_rows::gelu_f16_table<cpu_parts::gelu_tanh> const table;
    return table;
  }

  static void act_run(activation act, bool f16, float* x, std::int64_t n) {
    switch (act) {
      case activation::gelu_tanh:
        for (std::int64_t i = 0; i < n; ++i) x[i] = cpu_parts::gelu_tanh(x[i]);
        (void)f16;
        return;
      case activation::silu:
        for (std::int64_t i = 0; i < n; ++i) x[i] = cpu_parts::silu(x[i]);
        return;
      case activation::relu2:
        for (std::int64_t i = 0; i < n; ++i) {
          float const r = x[i] > 0.0f ? x[i] : 0.0f;
          x[i] = r * r;
        }
        return;
    }
  }

  static void glu_run(activation act, bool f16, float* g, float const* u, std::int64_t n) {
    switch (act) {
      case activation::gelu_tanh:
        if (f16)
          gelu_f16().mul(g, u, g, n);
        else
          kernels::cpu::vec_math::gelu_tanh_mul(g, u, g, n);
        return;
      case activation::silu:
        for (std::int64_t i = 0; i < n; ++i) g[i] = cpu_parts::silu(g[i]) * u[i];
        return;
      case activation::relu2:
        for (std::int64_t i = 0; i < n; ++i) {
          float const r = g[i] > 0.0f ? g[i] : 0.0f;
          g[i] = r * r * u[i];
        }
        return;
    }
  }

  // This rank's rows of a head split by vocabulary, then every rank's, into logits [m, vocab].
  void gathered_logits(matrix const& head, std::int64_t m, float* logits) {
    auto const mine = static_cast<std::size_t>(m * head.rows);
    head_part_.resize(mine);
    cpu_parts::matmul(*pool_, head, head_in_.data(), head_part_.data(), m);
    head_all_.resize(mine * static_cast<std::size_t>(ranks_.size));
    ranks_.all_gather(head_part_, head_all_);
    for (int r = 0; r < ranks_.size; ++r)
      for (std::int64_t i = 0; i < m; ++i)
        std::copy_n(head_all_.data() + static_cast<std::size_t>(r) * mine + i * head.rows,
                    head.rows, logits + i * head.vocab + r * head.rows);
  }

  void tally(matrix const& m, bool copied) const {
    if (m.data == nullptr) return;
    auto const bytes = static_cast<std::uint64_t>(m.rows) * m.row_bytes;
    if (copied)
      copied_bytes_ += bytes;
    else
      views_.emplace_back(reinterpret_cast<std::uintptr_t>(m.data),
                          reinterpret_cast<std::uintptr_t>(m.data) + bytes);
  }

  std::unique_ptr<kernels::cpu::thread_pool> pool_;
  dist::tensor_parallel ranks_;
  // Counted as weights bind (uploads are const: binding does not change how the backend runs).
  mutable std::vector<std::pair<std::uintptr_t, std::uintptr_t>> views_;  // [first, last) bytes
  mutable std::uint64_t copied_bytes_ = 0;
  std::vector<std::vector<std::byte>> owned_;  // moving a vector keeps its bytes where they are
  step step_;
  std::vector<float> head_in_;
  std::vector<float> head_part_, head_all_;  // a vocabulary-split head's logits: this rank's, all
  float* hidden_out_ = nullptr;              // capture_hidden's target
  cpu_parts::moe_scratch moe_;
  bool record_routes_ = false;
  std::vector<std::vector<std::int32_t>> routes_;
};

static_assert(backend<cpu>);

}  // namespace tf::backend
