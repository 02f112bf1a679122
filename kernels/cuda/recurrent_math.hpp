#pragma once
/// The CUDA recurrent kernels' arithmetic (kernels/cuda/recurrent.cuh), callable from host and
/// device, and host emulations that run one batch row's tokens exactly as the kernels do.
/// - conv1d: each output is the CPU backend's sum (bias, then the taps oldest first, each product
///   rounded on its own), so its bits are the CPU's wherever exp (in silu) rounds alike.
/// - ssm_scan: a warp per state row (head, channel); lane l holds entries l, l + 32, ... Each lane
///   sums its entries' products in order with fused multiply-adds, then the lanes' partials are
///   added in a butterfly (xor 16, 8, 4, 2, 1).
/// - gated_delta: a warp per value column of a head; lane l holds key rows l, l + 32, ... The
///   squares of q and k, S^T k and S^T q are summed as the scan sums.
/// Missing entries (rows past the state's) are zeros in every lane array, so they add exact zeros.
#include <kernels/portable/elementwise_math.hpp>
#include <kernels/portable/hd.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace tf::kernels::cuda::recurrent_math {

inline constexpr int warp = 32;
/// The most state entries one lane holds: rows of up to 256.
inline constexpr int max_lane_entries = 8;
/// The longest conv1d kernel.
inline constexpr int max_kernel = 16;

// The per-element rounding and activations, as the elementwise kernels compute them.
using portable::elementwise_math::mul_rn;
using portable::elementwise_math::sigmoid;
using portable::elementwise_math::silu;

/// softplus as torch computes it (linear above 20), as the CPU backend writes it.
TF_HD inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

/// std::clamp's result, spelled for the device.
TF_HD inline float clamp(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

/// Calls f(std::integral_constant<int, M>{}) for the M = ceil(rows / 32) entries each lane holds
/// of a state row of `rows` (1..256); false (and no call) for any other size.
template <class F>
bool with_lane_entries(std::int64_t rows, F&& f) {
  if (rows < 1 || rows > warp * max_lane_entries) return false;
  auto const m = static_cast<int>((rows + warp - 1) / warp);
  auto const pick = [&]<int... I>(std::integer_sequence<int, I...>) {
    return ((m == I + 1 ? (f(std::integral_constant<int, I + 1>{}), true) : false) || ...);
  };
  return pick(std::make_integer_sequence<int, max_lane_entries>{});
}

/// The lanes' partials p added as the warp's xor butterfly adds them (every lane ends with this).
inline float butterfly_sum(std::array<float, warp> p) {
  for (int off = warp / 2; off > 0; off /= 2) {
    std::array<float, warp> next{};
    for (int l = 0; l < warp; ++l) next[l] = p[l] + p[l ^ off];
    p = next;
  }
  return p[0];
}

// conv1d

/// One output of the causal conv1d: bias + sum over taps j < kernel, oldest first, of w[j] *
/// in[j * stride] (the token's own input last), each product rounded on its own; then silu when
/// asked.
TF_HD inline float conv1d_output(float const* w, float const* in, int stride, int kernel,
                                 float bias, bool silu_after) {
  float acc = bias;
  for (int j = 0; j < kernel; ++j) acc = acc + mul_rn(w[j], in[j * stride]);
  return silu_after ? silu(acc) : acc;
}

/// The conv1d kernel on the host over one row's n tokens, in place on x (rows ld apart), with
/// w [channels, kernel]; window [kernel - 1, channels] is read as zeros when reset and left
/// holding the last kernel - 1 inputs.
inline void conv1d_row(float* x, std::int64_t ld, std::int64_t n, std::int64_t channels,
                       float const* w, int kernel, float const* bias, bool silu_after,
                       float* window, bool reset) {
  int const keep = kernel - 1;
  for (std::int64_t c = 0; c < channels; ++c) {
    float in[max_kernel] = {};  // the keep inputs before the token, then the token's
    for (int j = 0; j < keep; ++j) in[j] = reset ? 0.0f : window[j * channels + c];
    for (std::int64_t t = 0; t < n; ++t) {
      float* xt = x + t * ld + c;
      in[keep] = *xt;
      *xt = conv1d_output(w + c * kernel, in, 1, kernel, bias ? bias[c] : 0.0f, silu_after);
      for (int j = 0; j < keep; ++j) in[j] = in[j + 1];
    }
    for (int j = 0; j < keep; ++j) window[j * channels + c] = in[j];
  }
}

// ssm_scan

/// A head's step and decay for one token: step = clamp(softplus(dt + dt_bias)), decay =
/// exp(step a).
struct ssm_gates {
  float step, decay;
};
TF_HD inline ssm_gates ssm_token_gates(float dt, float dt_bias, float a, float dt_min,
                                       float dt_max) {
  float const step = clamp(softplus(dt + dt_bias), dt_min, dt_max);
  return {step, std::exp(mul_rn(step, a))};
}

/// A lane's entries s of one state row for one token: s = s decay + dx B (dx = step x, B's
/// product rounded first); returns the lane's sum of s C, entry by entry.
template <int M>
TF_HD float ssm_lane_step(float (&s)[M], float const (&b)[M], float const (&c)[M], float decay,
                          float dx) {
  float acc = 0.0f;
  for (int m = 0; m < M; ++m) {
    s[m] = std::fma(s[m], decay, mul_rn(dx, b[m]));
    acc = std::fma(s[m], c[m], acc);
  }
  return acc;
}

/// y = C . h + d x, from the warp's sum.
TF_HD inline float ssm_output(float sum, float d, float x) {
  return std::fma(d, x, sum);
}

/// The ssm_scan kernel on the host over one row's n tokens (see launch.hpp's ssm_scan; Shape
/// has ssm_shape's fields): each state row run as its warp runs it.
template <class Shape>
void ssm_scan_row(Shape const& p, float const* xbc, std::int64_t xbc_ld, float const* dt,
                  std::int64_t dt_ld, float const* dt_bias, float const* a, float const* d,
                  std::int64_t n, float* state, bool reset, float* y, std::int64_t y_ld) {
  std::int64_t const hd = p.head_dim, ds = p.state_size;
  std::int64_t const d_inner = static_cast<std::int64_t>(p.heads) * hd;
  with_lane_entries(ds, [&](auto entries) {
    constexpr int M = decltype(entries)::value;
    for (std::int64_t row = 0; row < d_inner; ++row) {
      std::int64_t const h = row / hd, g = h / (p.heads / p.groups);
      float* sr = state + row * ds;
      float s[warp][M], b[warp][M], c[warp][M];
      for (int l = 0; l < warp; ++l)
        for (int m = 0; m < M; ++m) {
          std::int64_t const k = l + warp * m;
          s[l][m] = k < ds && !reset ? sr[k] : 0.0f;
        }
      for (std::int64_t t = 0; t < n; ++t) {
        float const* xt = xbc + t * xbc_ld;
        float const* bt = xt + d_inner + g * ds;
        float const* ct = bt + static_cast<std::int64_t>(p.groups) * ds;
        float const x = xt[row];
        auto const gates = ssm_token_gates(dt[t * dt_ld + h], dt_bias[h], a[h], p.dt_min, p.dt_max);
        std::array<float, warp> partial{};
        for (int l = 0; l < warp; ++l) {
          for (int m = 0; m < M; ++m) {
            std::int64_t const k = l + warp * m;
            b[l][m] = k < ds ? bt[k] : 0.0f;
            c[l][m] = k < ds ? ct[k] : 0.0f;
          }
          partial[l] = ssm_lane_step(s[l], b[l], c[l], gates.decay, mul_rn(gates.step, x));
        }
        y[t * y_ld + row] = ssm_output(butterfly_sum(partial), d[h], x);
      }
      for (int l = 0; l < warp; ++l)
        for (int m = 0; m < M; ++m)
          if (std::int64_t const k = l + warp * m; k < ds) sr[k] = s[l][m];
    }
  });
}

// gated_delta

/// The key head that value head j reads: j % k_heads when tiled, else j / (v_heads / k_heads).
TF_HD inline int delta_key_head(int j, int k_heads, int v_heads, bool tiled) {
  return tiled ? j % k_heads : j / (v_heads / k_heads);
}

/// A lane's sums of q^2 and k^2 over its rows, entry by entry.
template <int M>
TF_HD void delta_lane_squares(float const (&q)[M], float const (&k)[M], float& sq, float& sk) {
  sq = 0.0f;
  sk = 0.0f;
  for (int m = 0; m < M; ++m) {
    sq = std::fma(q[m], q[m], sq);
    sk = std::fma(k[m], k[m], sk);
  }
}

/// The L2 normalisations from the warp's sums of squares: q's also times k_dim^-1/2.
struct delta_norms {
  float q, k;
};
TF_HD inline delta_norms delta_token_norms(float sq, float sk, int k_dim, float eps) {
  float const q_scale = 1.0f / std::sqrt(static_cast<float>(k_dim));
  return {q_scale / std::sqrt(sq + eps), 1.0f / std::sqrt(sk + eps)};
}

/// A value head's beta = sigmoid(b) and decay = exp(a_coef softplus(a + dt_bias)) for one token.
struct delta_gates {
  float beta, decay;
};
TF_HD inline delta_gates delta_token_gates(float b, float a, float dt_bias, float a_coef) {
  return {sigmoid(b), std::exp(mul_rn(a_coef, softplus(a + dt_bias)))};
}

/// A lane's rows of q and k normalised in place.
template <int M>
TF_HD void delta_lane_normalise(float (&q)[M], float (&k)[M], delta_norms nrm) {
  for (int m = 0; m < M; ++m) {
    q[m] = mul_rn(q[m], nrm.q);
    k[m] = mul_rn(k[m], nrm.k);
  }
}

/// A lane's rows of the state column decayed (s = decay s); returns its sum of s k.
template <int M>
TF_HD float delta_lane_decay(float (&s)[M], float const (&k)[M], float decay) {
  float acc = 0.0f;
  for (int m = 0; m < M; ++m) {
    s[m] = mul_rn(s[m], decay);
    acc = std::fma(s[m], k[m], acc);
  }
  return acc;
}

/// The column's correction beta (v - S^T k), from the warp's sum S^T k.
TF_HD inline float delta_correction(float beta, float v, float kv) {
  return mul_rn(beta, v - kv);
}

/// A lane's rows updated (s += k delta); returns its sum of s q.
template <int M>
TF_HD float delta_lane_update(float (&s)[M], float const (&k)[M], float const (&q)[M],
                              float delta) {
  float acc = 0.0f;
  for (int m = 0; m < M; ++m) {
    s[m] = std::fma(k[m], delta, s[m]);
    acc = std::fma(s[m], q[m], acc);
  }
  return acc;
}

/// The gated_delta kernel on the host over one row's n tokens (see launch.hpp's gated_delta;
/// Shape has delta_shape's fields): each value column run as its warp runs it.
template <class Shape>
void gated_delta_row(Shape const& p, float const* qkv, std::int64_t qkv_ld, float const* b,
                     float const* a, std::int64_t ba_ld, float const* dt_bias, float const* a_coef,
                     std::int64_t n, float* state, bool reset, float* out, std::int64_t out_ld) {
  std::int64_t const dk = p.k_dim, dv = p.v_dim;
  std::int64_t const k_all = static_cast<std::int64_t>(p.k_heads) * dk;
  with_lane_entries(dk, [&](auto entries) {
    constexpr int M = decltype(entries)::value;
    for (int j = 0; j < p.v_heads; ++j) {
      std::int64_t const kh = delta_key_head(j, p.k_heads, p.v_heads, p.tiled);
      float* sj = state + j * dk * dv;
      for (std::int64_t v = 0; v < dv; ++v) {
        float s[warp][M], q[warp][M], k[warp][M];
        for (int l = 0; l < warp; ++l)
          for (int m = 0; m < M; ++m) {
            std::int64_t const i = l + warp * m;
            s[l][m] = i < dk && !reset ? sj[i * dv + v] : 0.0f;
          }
        for (std::int64_t t = 0; t < n; ++t) {
          float const* qt = qkv + t * qkv_ld + kh * dk;
          float const* kt = qt + k_all;
          float const vt = qkv[t * qkv_ld + 2 * k_all + j * dv + v];
          std::array<float, warp> sq{}, sk{}, partial{};
          for (int l = 0; l < warp; ++l) {
            for (int m = 0; m < M; ++m) {
              std::int64_t const i = l + warp * m;
              q[l][m] = i < dk ? qt[i] : 0.0f;
              k[l][m] = i < dk ? kt[i] : 0.0f;
            }
            delta_lane_squares(q[l], k[l], sq[l], sk[l]);
          }
          auto const norms =
              delta_token_norms(butterfly_sum(sq), butterfly_sum(sk), p.k_dim, p.norm_eps);
          auto const gates =
              delta_token_gates(b[t * ba_ld + j], a[t * ba_ld + j], dt_bias[j], a_coef[j]);
          for (int l = 0; l < warp; ++l) {
            delta_lane_normalise(q[l], k[l], norms);
            partial[l] = delta_lane_decay(s[l], k[l], gates.decay);
          }
          float const delta = delta_correction(gates.beta, vt, butterfly_sum(partial));
          for (int l = 0; l < warp; ++l) partial[l] = delta_lane_update(s[l], k[l], q[l], delta);
          out[t * out_ld + j * dv + v] = butterfly_sum(partial);
        }
        for (int l = 0; l < warp; ++l)
          for (int m = 0; m < M; ++m)
            if (std::int64_t const i = l + warp * m; i < dk) sj[i * dv + v] = s[l][m];
      }
    }
  });
}

}  // namespace tf::kernels::cuda::recurrent_math
