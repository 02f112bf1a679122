#pragma once
/// Token sampling's arithmetic and order, callable from host and device, and a host emulation of
/// the sampling kernels (kernels/cuda/sample.cuh) for one row in their exact order. The CPU
/// sampler (tf/sample/sampler.hpp) adjusts logits and weighs tokens with the same functions, so
/// for the same logits and uniform both pick the same token, unless a draw lands within rounding
/// of a boundary: the device adds in a fixed tree where the CPU adds in sequence.
///
/// The order of one draw: w = the adjusted logits, mx their largest (NaNs skipped), each token's
/// weight e = exp((w - mx) / T) in double (the largest weighs exactly 1). Without a cut the
/// candidates are the whole vocabulary in index order; with top-k, top-p or min-p they are the
/// tokens ranked by (w desc, index asc), cut by top-k, then by top-p (the shortest prefix whose
/// weight reaches top_p of the total), then by min-p (weight >= min_p). u = uniform * the
/// candidates' total; the token is the first candidate whose running sum passes u (the last one
/// when rounding leaves none).
#include <kernels/portable/elementwise_math.hpp>
#include <kernels/portable/hd.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace tf::kernels::portable::sample_math {

/// Threads of the block that samples one row.
inline constexpr int block_threads = 512;
/// The most top logprobs the device reports; a request for more samples on the host.
inline constexpr int max_top_logprobs = 20;

/// A row's outcome: sampled, or why not (the host turns these into the CPU sampler's errors).
enum row_status : std::int32_t { sampled = 0, no_finite_logit = 1, all_masked = 2 };

/// One change to a logit before the draw, applied in list order: a penalty for a token seen
/// `count` > 0 times in the history, or (count 0) an additive bias.
struct logit_adjust {
  std::int32_t token = 0;
  std::int32_t count = 0;
  float bias = 0.0f;
};

/// What one row asks of the device (the sampler's params, its adjustments and its uniform).
struct row_params {
  float temperature = 0.0f;  // 0: greedy
  std::int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::int32_t adjust_begin = 0;  // this row's adjustments: [begin, begin + count) of the list
  std::int32_t adjust_count = 0;
  std::int32_t penalty_count = 0;  // the leading adjustments that are penalties, distinct tokens
  std::int32_t top_logprobs = 0;   // <= max_top_logprobs
  std::int32_t logprob = 1;        // report the token's logprob (top_logprobs > 0 implies it)
  double uniform = 0.0;            // the draw's uniform in [0, 1); unused when greedy
};

/// What sample_prepare leaves for sample_finish of a row with a cut.
struct row_state {
  float mx = 0.0f;  // the adjusted row's largest logit
  double z = 0.0;   // the vocabulary's total weight (top-p)
};

/// What one row gives back.
struct row_result {
  std::int32_t token = 0;
  std::int32_t status = sampled;
  float logprob = 0.0f;  // NaN when not asked for
  std::int32_t top_count = 0;
  double lse = 0.0;  // log-sum-exp of the raw logits (when a logprob is asked for)
  std::int32_t top_token[max_top_logprobs] = {};
  float top_logprob[max_top_logprobs] = {};
};

TF_HD inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

/// An unsigned key in the float order: -0 ranks with +0, a NaN below everything.
TF_HD inline std::uint32_t order_key(float w) {
  if (w != w) return 0;
  if (w == 0.0f) w = 0.0f;
  std::uint32_t const u = float_bits(w);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// A token's rank: larger for a larger logit, then for a lower index (every key distinct).
TF_HD inline std::uint64_t rank_key(float w, std::int64_t i) {
  return (static_cast<std::uint64_t>(order_key(w)) << 32) |
         static_cast<std::uint64_t>(0xffffffffu - static_cast<std::uint32_t>(i));
}
TF_HD inline std::int32_t rank_index(std::uint64_t key) {
  return static_cast<std::int32_t>(0xffffffffu - static_cast<std::uint32_t>(key));
}

/// The larger of m and v, skipping a NaN v.
TF_HD inline float max_skip_nan(float m, float v) {
  return v > m ? v : m;
}

/// A penalised logit: CTRL's repetition penalty, then presence and frequency, in the CPU's f32
/// steps (rounded one by one, never fused).
TF_HD inline float penalize(float v, float repetition, float presence, float frequency,
                            std::int32_t count) {
  using elementwise_math::add_rn;
  using elementwise_math::mul_rn;
  v = v > 0.0f ? v / repetition : mul_rn(v, repetition);
  return v - add_rn(presence, mul_rn(frequency, static_cast<float>(count)));
}

/// One adjustment applied to its token's logit v.
TF_HD inline float adjust(float v, logit_adjust const& a, row_params const& p) {
  return a.count > 0
             ? penalize(v, p.repetition_penalty, p.presence_penalty, p.frequency_penalty, a.count)
             : elementwise_math::add_rn(v, a.bias);
}

TF_HD inline double inv_temperature(float t) {
  return 1.0 / static_cast<double>(t);
}

/// A token's unnormalised probability e^((w - mx) / T), in double.
TF_HD inline double weight(float w, float mx, double inv_t) {
  return std::exp((static_cast<double>(w) - static_cast<double>(mx)) * inv_t);
}

/// exp(w - mx) of a raw logit, the terms of the log-sum-exp.
TF_HD inline double raw_exp(float w, float mx) {
  return std::exp(static_cast<double>(w) - static_cast<double>(mx));
}

TF_HD inline double log_sum_exp(float mx, double sum) {
  return static_cast<double>(mx) + std::log(sum);
}

TF_HD inline float logprob_of(float w, double lse) {
  return static_cast<float>(static_cast<double>(w) - lse);
}

/// Whether top-k, top-p or min-p cuts the candidates of a vocabulary of n.
TF_HD inline bool has_cut(std::int32_t top_k, float top_p, float min_p, std::int64_t n) {
  return (top_k > 0 && top_k < n) || top_p < 1.0f || min_p > 0.0f;
}

/// Candidates top-k keeps of n.
TF_HD inline std::int64_t kept(std::int32_t top_k, std::int64_t n) {
  return top_k > 0 && top_k < n ? top_k : n;
}

/// The running weight top-p's prefix must reach, of the vocabulary's total z.
TF_HD inline double top_p_mass(float top_p, double z) {
  return static_cast<double>(top_p) * z;
}

/// min-p's floor on a weight: min_p times the top weight, which is exactly 1.
TF_HD inline double min_p_floor(float min_p) {
  return static_cast<double>(min_p);
}

/// The draw's point: the uniform times the candidates' total weight.
TF_HD inline double draw_point(double uniform, double total) {
  return uniform * total;
}

/// Thread t's contiguous share [begin(t), begin(t + 1)) of n items over `threads`.
TF_HD inline std::int64_t chunk_begin(std::int64_t n, int t, int threads) {
  return n * t / threads;
}

// Host emulations of the kernels' block steps, for the tests and the emulated backend.

/// The block's fold of its threads' partials p [block_threads]: p[i] += p[i + s], s halving.
inline double fold(double* p) {
  for (int s = block_threads / 2; s > 0; s /= 2)
    for (int i = 0; i < s; ++i) p[i] += p[i + s];
  return p[0];
}

/// Strided partial sums (thread t adds f(t), f(t + threads), ... in order), folded.
template <class F>
double strided_sum(std::int64_t n, F const& f) {
  double p[block_threads];
  for (int t = 0; t < block_threads; ++t) {
    double s = 0.0;
    for (std::int64_t j = t; j < n; j += block_threads) s += f(j);
    p[t] = s;
  }
  return fold(p);
}

/// The block's inclusive scan of p [block_threads] (Hillis-Steele: q[t] = p[t - off] + p[t] for
/// off = 1, 2, 4, ...), then shifted to each thread's exclusive start.
inline void exclusive_starts(double* p) {
  double q[block_threads];
  for (int off = 1; off < block_threads; off *= 2) {
    for (int t = 0; t < block_threads; ++t) q[t] = t >= off ? p[t - off] + p[t] : p[t];
    std::copy(q, q + block_threads, p);
  }
  for (int t = block_threads - 1; t > 0; --t) p[t] = p[t - 1];
  p[0] = 0.0;
}

/// Running sums of e(0..n) as the kernels form them: thread t's chunk total, the block's scan of
/// the totals, then c = start + e(j) along the chunk. Returns the first j where stop(c) holds
/// (n where none does) and sets `last` to the c of item n - 1.
template <class E, class Stop>
std::int64_t first_running(std::int64_t n, E const& e, Stop const& stop, double& last) {
  double starts[block_threads];
  for (int t = 0; t < block_threads; ++t) {
    double s = 0.0;
    for (std::int64_t j = chunk_begin(n, t, block_threads);
         j < chunk_begin(n, t + 1, block_threads); ++j)
      s = s + e(j);
    starts[t] = s;
  }
  exclusive_starts(starts);
  std::int64_t first = n;
  for (int t = 0; t < block_threads; ++t) {
    double c = starts[t];
    for (std::int64_t j = chunk_begin(n, t, block_threads);
         j < chunk_begin(n, t + 1, block_threads); ++j) {
      c = c + e(j);
      if (first == n && stop(c)) first = j;
    }
    if (t == block_threads - 1) last = c;
  }
  return first;
}

/// The draw over candidates e(0..n): the first whose running sum passes uniform * total.
template <class E>
std::int64_t draw_index(std::int64_t n, E const& e, double uniform) {
  double total = 0.0;
  first_running(
      n, e, [](double) { return false; }, total);
  double const u = draw_point(uniform, total);
  double unused = 0.0;
  std::int64_t const j = first_running(
      n, e, [u](double c) { return u < c; }, unused);
  return j < n ? j : n - 1;
}

/// The sampling kernels' result for one row of raw logits w0 [n] on the host, in their order;
/// `adj` holds the row's adjustments ([p.adjust_count]).
inline row_result sample_row_reference(float const* w0, std::int64_t n, row_params const& p,
                                       logit_adjust const* adj) {
  row_result out;
  float mx0 = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < n; ++j) mx0 = max_skip_nan(mx0, w0[j]);
  bool const want_lp = p.logprob != 0 || p.top_logprobs > 0;
  bool const greedy = p.temperature == 0.0f;
  if ((want_lp || (greedy && p.adjust_count == 0)) && !std::isfinite(mx0)) {
    out.status = no_finite_logit;
    return out;
  }
  if (want_lp)
    out.lse = log_sum_exp(mx0, strided_sum(n, [&](std::int64_t j) { return raw_exp(w0[j], mx0); }));
  std::vector<float> work(w0, w0 + n);
  for (std::int32_t i = 0; i < p.adjust_count; ++i) {
    auto const& a = adj[i];
    work[static_cast<std::size_t>(a.token)] = adjust(work[static_cast<std::size_t>(a.token)], a, p);
  }
  if (greedy) {
    if (std::isnan(work[0])) {
      out.token = 0;
    } else {
      std::uint64_t best = 0;
      for (std::int64_t j = 0; j < n; ++j) best = std::max(best, rank_key(work[j], j));
      out.token = rank_index(best);
    }
  } else {
    float mx = -std::numeric_limits<float>::infinity();
    for (float v : work) mx = max_skip_nan(mx, v);
    if (!std::isfinite(mx)) {
      out.status = all_masked;
      return out;
    }
    double const inv_t = inv_temperature(p.temperature);
    if (!has_cut(p.top_k, p.top_p, p.min_p, n)) {
      auto const e = [&](std::int64_t j) { return weight(work[j], mx, inv_t); };
      out.token = static_cast<std::int32_t>(draw_index(n, e, p.uniform));
    } else {
      double const z =
          p.top_p < 1.0f
              ? strided_sum(n, [&](std::int64_t j) { return weight(work[j], mx, inv_t); })
              : 0.0;
      std::vector<std::uint64_t> keys(static_cast<std::size_t>(n));
      for (std::int64_t j = 0; j < n; ++j) keys[j] = ~rank_key(work[j], j);
      std::sort(keys.begin(), keys.end());
      auto const e = [&](std::int64_t i) { return weight(work[rank_index(~keys[i])], mx, inv_t); };
      std::int64_t m = kept(p.top_k, n);
      if (p.top_p < 1.0f) {
        double const mass = top_p_mass(p.top_p, z);
        double last = 0.0;
        std::int64_t const j = first_running(
            m, e, [mass](double c) { return c >= mass; }, last);
        if (j < m) m = j + 1;
      }
      if (p.min_p > 0.0f) {
        double const floor = min_p_floor(p.min_p);
        for (std::int64_t i = 1; i < m; ++i)
          if (e(i) < floor) {
            m = i;
            break;
          }
      }
      out.token = rank_index(~keys[static_cast<std::size_t>(draw_index(m, e, p.uniform))]);
    }
  }
  out.logprob =
      want_lp ? logprob_of(w0[out.token], out.lse) : std::numeric_limits<float>::quiet_NaN();
  out.top_count = static_cast<std::int32_t>(std::min<std::int64_t>(p.top_logprobs, n));
  std::uint64_t below = ~std::uint64_t{0};
  for (std::int32_t k = 0; k < out.top_count; ++k) {
    std::uint64_t best = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      auto const r = rank_key(w0[j], j);
      if (r < below) best = std::max(best, r);
    }
    below = best;
    out.top_token[k] = rank_index(best);
    out.top_logprob[k] = logprob_of(w0[out.top_token[k]], out.lse);
  }
  return out;
}

}  // namespace tf::kernels::portable::sample_math
