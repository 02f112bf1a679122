#pragma once
/// The CPU backend's recurrent layers over one stream's tokens: the causal depthwise conv1d with
/// its window, the Mamba2 selective scan and the gated delta rule. Each steps its f32 state one
/// token at a time in a fixed order, so a prompt gives the same state (to the bit) however it is
/// cut into forwards.
#include <tf/backend/backend.hpp>
#include <tf/backend/cpu/math.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tf::backend::cpu_parts {

/// softplus as torch computes it (linear above 20).
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

/// Channels [c0, c1) of n tokens x [n, stride] (in place): y_t = bias + sum_j w[c][j] *
/// x_{t-K+1+j}, then silu when asked. `window` [K-1, channels] holds the K-1 inputs before the
/// first token, oldest first, and is left holding the last K-1.
inline void conv1d_channels(float* x, std::int64_t n, std::int64_t stride, std::int64_t channels,
                            float const* w, float const* bias, int kernel, bool silu, float* window,
                            std::int64_t c0, std::int64_t c1) {
  int const keep = kernel - 1;
  for (std::int64_t c = c0; c < c1; ++c) {
    float const* wc = w + c * kernel;
    float hist[16];
    for (int j = 0; j < keep; ++j) hist[j] = window[j * channels + c];
    for (std::int64_t t = 0; t < n; ++t) {
      float& xt = x[t * stride + c];
      float const in = xt;
      float acc = bias ? bias[c] : 0.0f;
      for (int j = 0; j < keep; ++j) acc += wc[j] * hist[j];
      acc += wc[keep] * in;
      for (int j = 0; j + 1 < keep; ++j) hist[j] = hist[j + 1];
      if (keep > 0) hist[keep - 1] = in;
      xt = silu ? cpu_parts::silu(acc) : acc;
    }
    for (int j = 0; j < keep; ++j) window[j * channels + c] = hist[j];
  }
}

/// Mamba2 head h over n tokens: xbc [n, stride] holds x (heads * head_dim) | B | C (groups *
/// state_size each); dt [n, dt_stride] the raw step per head. state [head_dim, state_size] of
/// head h; y [n, y_stride] gets the head's head_dim outputs (y = C . h + D x).
inline void ssm_scan_head(ssm_params const& p, int h, float const* xbc, std::int64_t stride,
                          float const* dt, std::int64_t dt_stride, float dt_bias, float a, float d,
                          std::int64_t n, float* state, float* y, std::int64_t y_stride) {
  std::int64_t const hd = p.head_dim, ds = p.state_size;
  std::int64_t const d_inner = static_cast<std::int64_t>(p.heads) * hd;
  int const g = h / (p.heads / p.groups);
  for (std::int64_t t = 0; t < n; ++t) {
    float const* xt = xbc + t * stride + h * hd;
    float const* bt = xbc + t * stride + d_inner + g * ds;
    float const* ct =
        xbc + t * stride + d_inner + static_cast<std::int64_t>(p.groups) * ds + g * ds;
    float const step = std::clamp(softplus(dt[t * dt_stride + h] + dt_bias), p.dt_min, p.dt_max);
    float const decay = std::exp(step * a);
    float* yt = y + t * y_stride + h * hd;
    for (std::int64_t i = 0; i < hd; ++i) {
      float* si = state + i * ds;
      float const dx = step * xt[i];
      float acc = 0.0f;
      for (std::int64_t k = 0; k < ds; ++k) {
        si[k] = si[k] * decay + dx * bt[k];
        acc += si[k] * ct[k];
      }
      yt[i] = acc + d * xt[i];
    }
  }
}

/// The gated delta rule for value head j over n tokens. qkv [n, stride] holds q (k_heads * k_dim)
/// | k (same) | v (v_heads * v_dim) after the conv; b, a [n, v_heads] the raw beta and decay
/// inputs. state [k_dim, v_dim] of head j; out [n, v_heads * v_dim].
inline void gated_delta_head(delta_params const& p, int j, float const* qkv, std::int64_t stride,
                             float const* b, float const* a, float dt_bias, float a_coef,
                             std::int64_t n, float* state, float* out) {
  std::int64_t const dk = p.k_dim, dv = p.v_dim;
  int const kh = p.tiled ? j % p.k_heads : j / (p.v_heads / p.k_heads);
  std::int64_t const k_all = static_cast<std::int64_t>(p.k_heads) * dk;
  float const q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  float q[256], k[256], delta[256];
  for (std::int64_t t = 0; t < n; ++t) {
    float const* row = qkv + t * stride;
    float const* qt = row + kh * dk;
    float const* kt = row + k_all + kh * dk;
    float const* vt = row + 2 * k_all + j * dv;
    float sq = 0.0f, sk = 0.0f;
    for (std::int64_t i = 0; i < dk; ++i) {
      sq += qt[i] * qt[i];
      sk += kt[i] * kt[i];
    }
    float const nq = q_scale / std::sqrt(sq + p.norm_eps), nk = 1.0f / std::sqrt(sk + p.norm_eps);
    for (std::int64_t i = 0; i < dk; ++i) {
      q[i] = qt[i] * nq;
      k[i] = kt[i] * nk;
    }
    float const beta = sigmoid(b[t * p.v_heads + j]);
    float const decay = std::exp(a_coef * softplus(a[t * p.v_heads + j] + dt_bias));
    for (std::int64_t v = 0; v < dv; ++v) delta[v] = 0.0f;
    for (std::int64_t i = 0; i < dk; ++i) {
      float* si = state + i * dv;
      for (std::int64_t v = 0; v < dv; ++v) {
        si[v] *= decay;
        delta[v] += si[v] * k[i];
      }
    }
    for (std::int64_t v = 0; v < dv; ++v) delta[v] = beta * (vt[v] - delta[v]);
    float* ot = out + t * static_cast<std::int64_t>(p.v_heads) * dv + j * dv;
    for (std::int64_t v = 0; v < dv; ++v) ot[v] = 0.0f;
    for (std::int64_t i = 0; i < dk; ++i) {
      float* si = state + i * dv;
      for (std::int64_t v = 0; v < dv; ++v) {
        si[v] += k[i] * delta[v];
        ot[v] += si[v] * q[i];
      }
    }
  }
}

}  // namespace tf::backend::cpu_parts
