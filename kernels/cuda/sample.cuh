#pragma once
/// The sampling kernels: one block of portable::sample_math::block_threads per logit row, in
/// sample_math's order (sample_row_reference is the host copy). sample_prepare takes the raw
/// row's max and log-sum-exp, applies the row's adjustments to a copy, and picks a greedy token
/// or draws over the vocabulary in index order; a row with top-k / top-p / min-p writes rank keys
/// that CUB's segmented radix sort orders (w desc, index asc; every key distinct, so the order
/// does not depend on the sort's stability), and sample_finish cuts and draws over them. Then the
/// token's logprob and the top logprobs from the raw row. Nothing depends on the other rows.
#include <kernels/cuda/launch.hpp>
#include <kernels/portable/sample_math.hpp>

#include <cuda_runtime.h>
#include <math_constants.h>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tf::kernels::cuda {
namespace detail {

inline constexpr int sample_threads = portable::sample_math::block_threads;

inline void sample_launched(char const* what) {
  cudaError_t const e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf: CUDA kernel ") + what +
                             " failed to launch: " + cudaGetErrorString(e));
}

// The block's shared scratch for its reductions and scans.
struct sample_shared {
  double p[sample_threads], q[sample_threads];
  std::uint64_t k[sample_threads];
  std::int64_t i[sample_threads];
  float f[sample_threads];
  double last;
};

// The block's sum of its threads' partials, folded as portable::sample_math::fold; every thread gets it.
__device__ inline double sample_fold(double v, sample_shared& sh) {
  int const t = static_cast<int>(threadIdx.x);
  sh.p[t] = v;
  __syncthreads();
  for (int s = sample_threads / 2; s > 0; s /= 2) {
    if (t < s) sh.p[t] += sh.p[t + s];
    __syncthreads();
  }
  double const total = sh.p[0];
  __syncthreads();
  return total;
}

__device__ inline float sample_block_max(float v, sample_shared& sh) {
  int const t = static_cast<int>(threadIdx.x);
  sh.f[t] = v;
  __syncthreads();
  for (int s = sample_threads / 2; s > 0; s /= 2) {
    if (t < s) sh.f[t] = portable::sample_math::max_skip_nan(sh.f[t], sh.f[t + s]);
    __syncthreads();
  }
  float const m = sh.f[0];
  __syncthreads();
  return m;
}

__device__ inline std::uint64_t sample_key_max(std::uint64_t v, sample_shared& sh) {
  int const t = static_cast<int>(threadIdx.x);
  sh.k[t] = v;
  __syncthreads();
  for (int s = sample_threads / 2; s > 0; s /= 2) {
    if (t < s && sh.k[t + s] > sh.k[t]) sh.k[t] = sh.k[t + s];
    __syncthreads();
  }
  std::uint64_t const m = sh.k[0];
  __syncthreads();
  return m;
}

__device__ inline std::int64_t sample_index_min(std::int64_t v, sample_shared& sh) {
  int const t = static_cast<int>(threadIdx.x);
  sh.i[t] = v;
  __syncthreads();
  for (int s = sample_threads / 2; s > 0; s /= 2) {
    if (t < s && sh.i[t + s] < sh.i[t]) sh.i[t] = sh.i[t + s];
    __syncthreads();
  }
  std::int64_t const m = sh.i[0];
  __syncthreads();
  return m;
}

// portable::sample_math::first_running on the block: each thread's chunk total, a Hillis-Steele scan of the
// totals, the running sums along each chunk; the first j where stop(c) holds (n where none) and
// the last running sum.
template <class E, class Stop>
__device__ std::int64_t sample_first_running(std::int64_t n, E const& e, Stop const& stop,
                                             double& last, sample_shared& sh) {
  int const t = static_cast<int>(threadIdx.x);
  std::int64_t const b = portable::sample_math::chunk_begin(n, t, sample_threads);
  std::int64_t const end = portable::sample_math::chunk_begin(n, t + 1, sample_threads);
  double s = 0.0;
  for (std::int64_t j = b; j < end; ++j) s = s + e(j);
  sh.p[t] = s;
  __syncthreads();
  for (int off = 1; off < sample_threads; off *= 2) {
    sh.q[t] = t >= off ? sh.p[t - off] + sh.p[t] : sh.p[t];
    __syncthreads();
    sh.p[t] = sh.q[t];
    __syncthreads();
  }
  double c = t > 0 ? sh.p[t - 1] : 0.0;
  std::int64_t first = n;
  for (std::int64_t j = b; j < end; ++j) {
    c = c + e(j);
    if (first == n && stop(c)) first = j;
  }
  if (t == sample_threads - 1) sh.last = c;
  __syncthreads();
  last = sh.last;
  return sample_index_min(first, sh);
}

// portable::sample_math::draw_index on the block.
template <class E>
__device__ std::int64_t sample_draw(std::int64_t n, E const& e, double uniform, sample_shared& sh) {
  double total = 0.0, unused = 0.0;
  sample_first_running(
      n, e, [](double) { return false; }, total, sh);
  double const u = portable::sample_math::draw_point(uniform, total);
  std::int64_t const j = sample_first_running(
      n, e, [u](double c) { return u < c; }, unused, sh);
  return j < n ? j : n - 1;
}

// The row's logits after its adjustments: the adjusted copy, or the raw row without any.
__device__ inline float const* sample_work_row(float const* logits, float const* work,
                                               portable::sample_math::row_params const& p, std::int64_t r,
                                               std::int64_t vocab) {
  return p.adjust_count > 0 ? work + r * vocab : logits + r * vocab;
}

__global__ void __launch_bounds__(sample_threads)
    sample_prepare(float const* logits, std::int64_t vocab, portable::sample_math::row_params const* params,
                   portable::sample_math::logit_adjust const* adjust, float* work, std::uint64_t* keys,
                   std::int32_t* segments, std::int64_t rows, portable::sample_math::row_state* state,
                   portable::sample_math::row_result* out) {
  __shared__ sample_shared sh;
  std::int64_t const r = blockIdx.x;
  int const t = static_cast<int>(threadIdx.x);
  auto const p = params[r];
  float const* w0 = logits + r * vocab;
  if (t == 0) {
    segments[r] = 0;
    segments[rows + r] = 0;
  }
  float mx0 = -CUDART_INF_F;
  for (std::int64_t j = t; j < vocab; j += sample_threads)
    mx0 = portable::sample_math::max_skip_nan(mx0, w0[j]);
  mx0 = sample_block_max(mx0, sh);
  bool const want_lp = p.logprob != 0 || p.top_logprobs > 0;
  bool const greedy = p.temperature == 0.0f;
  portable::sample_math::row_result& o = out[r];
  if ((want_lp || (greedy && p.adjust_count == 0)) && !isfinite(mx0)) {
    if (t == 0) o.status = portable::sample_math::no_finite_logit;
    return;
  }
  double lse = 0.0;
  if (want_lp) {
    double s = 0.0;
    for (std::int64_t j = t; j < vocab; j += sample_threads) s += portable::sample_math::raw_exp(w0[j], mx0);
    lse = portable::sample_math::log_sum_exp(mx0, sample_fold(s, sh));
  }
  if (p.adjust_count > 0) {
    float* wr = work + r * vocab;
    for (std::int64_t j = t; j < vocab; j += sample_threads) wr[j] = w0[j];
    __syncthreads();
    // Penalties name distinct tokens, so the block takes them at once; biases may repeat a token
    // and follow in list order.
    for (std::int32_t i = t; i < p.penalty_count; i += sample_threads) {
      auto const a = adjust[p.adjust_begin + i];
      wr[a.token] = portable::sample_math::adjust(wr[a.token], a, p);
    }
    __syncthreads();
    if (t == 0)
      for (std::int32_t i = p.penalty_count; i < p.adjust_count; ++i) {
        auto const a = adjust[p.adjust_begin + i];
        wr[a.token] = portable::sample_math::adjust(wr[a.token], a, p);
      }
    __syncthreads();
  }
  float const* w = sample_work_row(logits, work, p, r, vocab);
  std::int32_t token = -1;  // -1: drawn by sample_finish over the sorted ranks
  if (greedy) {
    std::uint64_t best = 0;
    for (std::int64_t j = t; j < vocab; j += sample_threads) {
      auto const k = portable::sample_math::rank_key(w[j], j);
      if (k > best) best = k;
    }
    best = sample_key_max(best, sh);
    token = isnan(w[0]) ? 0 : portable::sample_math::rank_index(best);
  } else {
    float mx = -CUDART_INF_F;
    for (std::int64_t j = t; j < vocab; j += sample_threads)
      mx = portable::sample_math::max_skip_nan(mx, w[j]);
    mx = sample_block_max(mx, sh);
    if (!isfinite(mx)) {
      if (t == 0) o.status = portable::sample_math::all_masked;
      return;
    }
    double const inv_t = portable::sample_math::inv_temperature(p.temperature);
    auto const e = [&](std::int64_t j) { return portable::sample_math::weight(w[j], mx, inv_t); };
    if (!portable::sample_math::has_cut(p.top_k, p.top_p, p.min_p, vocab)) {
      token = static_cast<std::int32_t>(sample_draw(vocab, e, p.uniform, sh));
    } else {
      double z = 0.0;
      if (p.top_p < 1.0f) {
        double s = 0.0;
        for (std::int64_t j = t; j < vocab; j += sample_threads) s += e(j);
        z = sample_fold(s, sh);
      }
      std::uint64_t* kr = keys + r * vocab;
      for (std::int64_t j = t; j < vocab; j += sample_threads)
        kr[j] = ~portable::sample_math::rank_key(w[j], j);
      if (t == 0) {
        segments[r] = static_cast<std::int32_t>(r * vocab);
        segments[rows + r] = static_cast<std::int32_t>((r + 1) * vocab);
        state[r] = {mx, z};
      }
    }
  }
  if (t == 0) {
    o.token = token;
    o.status = portable::sample_math::sampled;
    o.lse = lse;
  }
}

__global__ void __launch_bounds__(sample_threads)
    sample_finish(float const* logits, std::int64_t vocab, portable::sample_math::row_params const* params,
                  float const* work, std::uint64_t const* sorted,
                  portable::sample_math::row_state const* state, portable::sample_math::row_result* out) {
  __shared__ sample_shared sh;
  std::int64_t const r = blockIdx.x;
  int const t = static_cast<int>(threadIdx.x);
  auto const p = params[r];
  portable::sample_math::row_result& o = out[r];
  if (o.status != portable::sample_math::sampled) return;
  std::int32_t token = o.token;
  float const* w0 = logits + r * vocab;
  if (token < 0) {
    float const* w = sample_work_row(logits, work, p, r, vocab);
    std::uint64_t const* sr = sorted + r * vocab;
    auto const st = state[r];
    double const inv_t = portable::sample_math::inv_temperature(p.temperature);
    auto const e = [&](std::int64_t i) {
      return portable::sample_math::weight(w[portable::sample_math::rank_index(~sr[i])], st.mx, inv_t);
    };
    std::int64_t m = portable::sample_math::kept(p.top_k, vocab);
    if (p.top_p < 1.0f) {
      double const mass = portable::sample_math::top_p_mass(p.top_p, st.z);
      double last = 0.0;
      std::int64_t const j = sample_first_running(
          m, e, [mass](double c) { return c >= mass; }, last, sh);
      if (j < m) m = j + 1;
    }
    if (p.min_p > 0.0f) {
      double const floor = portable::sample_math::min_p_floor(p.min_p);
      std::int64_t first = m;
      for (std::int64_t i = 1 + t; i < m; i += sample_threads)
        if (e(i) < floor) {
          first = i;
          break;
        }
      m = sample_index_min(first, sh);
    }
    token = portable::sample_math::rank_index(~sr[sample_draw(m, e, p.uniform, sh)]);
  }
  bool const want_lp = p.logprob != 0 || p.top_logprobs > 0;
  int const top = p.top_logprobs < vocab ? p.top_logprobs : static_cast<int>(vocab);
  std::uint64_t below = ~std::uint64_t{0};
  for (int k = 0; k < top; ++k) {
    std::uint64_t best = 0;
    for (std::int64_t j = t; j < vocab; j += sample_threads) {
      auto const key = portable::sample_math::rank_key(w0[j], j);
      if (key < below && key > best) best = key;
    }
    below = sample_key_max(best, sh);
    if (t == 0) {
      o.top_token[k] = portable::sample_math::rank_index(below);
      o.top_logprob[k] = portable::sample_math::logprob_of(w0[o.top_token[k]], o.lse);
    }
  }
  if (t == 0) {
    o.token = token;
    o.logprob = want_lp ? portable::sample_math::logprob_of(w0[token], o.lse) : CUDART_NAN_F;
    o.top_count = top;
  }
}

inline void sample_check(std::int64_t rows, std::int64_t vocab) {
  if (rows < 0 || vocab <= 0 || rows * vocab > INT_MAX)
    throw std::invalid_argument("tf: CUDA sample of " + std::to_string(rows) + " rows of " +
                                std::to_string(vocab) + " logits");
}

}  // namespace detail

std::size_t sample_sort_bytes(std::int64_t rows, std::int64_t vocab) {
  detail::sample_check(rows, vocab);
  std::size_t bytes = 0;
  std::int32_t* offsets = nullptr;
  cub::DoubleBuffer<std::uint64_t> keys(nullptr, nullptr);
  cudaError_t const e =
      cub::DeviceSegmentedRadixSort::SortKeys(nullptr, bytes, keys, static_cast<int>(rows * vocab),
                                              static_cast<int>(rows), offsets, offsets);
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("tf: CUDA sample sort sizing failed: ") +
                             cudaGetErrorString(e));
  return bytes;
}

void sample(float const* logits, std::int64_t rows, std::int64_t vocab,
            portable::sample_math::row_params const* host_params, portable::sample_math::row_params const* params,
            portable::sample_math::logit_adjust const* adjust, sample_scratch const& scratch,
            portable::sample_math::row_result* out, stream_t s) {
  detail::sample_check(rows, vocab);
  if (rows == 0) return;
  bool cut = false, adjusted = false;
  for (std::int64_t r = 0; r < rows; ++r) {
    auto const& p = host_params[r];
    if (p.top_logprobs < 0 || p.top_logprobs > portable::sample_math::max_top_logprobs)
      throw std::invalid_argument("tf: CUDA sample asks for " + std::to_string(p.top_logprobs) +
                                  " top logprobs");
    cut = cut || (p.temperature != 0.0f && portable::sample_math::has_cut(p.top_k, p.top_p, p.min_p, vocab));
    adjusted = adjusted || p.adjust_count > 0;
  }
  if ((adjusted && !scratch.work) ||
      (cut && (!scratch.keys || !scratch.sorted || !scratch.sort_temp)))
    throw std::invalid_argument("tf: CUDA sample without the scratch its rows need");
  auto const grid = static_cast<unsigned>(rows);
  detail::sample_prepare<<<grid, detail::sample_threads, 0, s>>>(
      logits, vocab, params, adjust, scratch.work, scratch.keys, scratch.segments, rows,
      scratch.state, out);
  detail::sample_launched("sample_prepare");
  std::uint64_t const* ranked = nullptr;
  if (cut) {
    // The double-buffer form: the sort ping-pongs between keys and sorted, no third copy.
    std::size_t bytes = scratch.sort_bytes;
    cub::DoubleBuffer<std::uint64_t> keys(scratch.keys, scratch.sorted);
    cudaError_t const e = cub::DeviceSegmentedRadixSort::SortKeys(
        scratch.sort_temp, bytes, keys, static_cast<int>(rows * vocab), static_cast<int>(rows),
        scratch.segments, scratch.segments + rows, 0, 64, s);
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("tf: CUDA sample sort failed: ") +
                               cudaGetErrorString(e));
    ranked = keys.Current();
  }
  detail::sample_finish<<<grid, detail::sample_threads, 0, s>>>(logits, vocab, params, scratch.work,
                                                                ranked, scratch.state, out);
  detail::sample_launched("sample_finish");
}

}  // namespace tf::kernels::cuda
