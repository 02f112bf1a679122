#pragma once
/// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition/presence/frequency
/// penalties and a per-request logit bias, with a per-request seeded PRNG; returns the token, its
/// logprob and top logprobs; a request's grammar (response_format) masks its own row.
#include <kernels/cpu/vec_math.hpp>
#include <kernels/portable/sample_math.hpp>
#include <tf/error.hpp>
#include <tf/grammar/token_mask.hpp>
#include <tf/sample/rng.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tf::sample {

/// An additive bias on one token's logit (OpenAI's logit_bias: -100 bans, +100 forces).
struct token_bias {
  std::int32_t token = 0;
  float bias = 0.0f;
};

/// What a request asks of the sampler; temperature 0 means greedy.
struct sampling_params {
  float temperature = 0.0f;
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // CTRL-style: positive logits divided, negative multiplied
  float presence_penalty = 0.0f;    // subtracted once from every token seen in the history
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the history
  std::uint64_t seed = 0;
  int top_logprobs = 0;  // how many alternatives to report (0: none)
  // Report the sampled token's logprob: a pass of exp over the whole vocabulary per token, so a
  // caller that does not show it turns it off (top_logprobs > 0 computes it anyway).
  bool logprobs = true;
  // Added to the logits before the penalties' and temperature's turn, on this request's own row
  // only, so other streams in the batch never see it.
  std::vector<token_bias> logit_bias = {};
  // A grammar the tokens must follow (response_format): applied after the bias, on this
  // request's own row; end-of-generation tokens are allowed only where the grammar can end.
  std::shared_ptr<grammar::constraint const> constraint = {};
};

/// One token and its log-probability under the model's distribution.
struct token_logprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

/// A sampled token, its logprob (NaN when not asked for) and, when asked, the most likely
/// alternatives (best first).
struct sample_result {
  std::int32_t token = 0;
  float logprob = 0.0f;
  std::vector<token_logprob> top;
  std::int32_t rank = 0;  // scored tokens: 1 + how many tokens the model ranks above it
};

namespace detail {

/// The largest logit; throws when it is not finite.
inline float finite_max(std::span<float const> logits) {
  float const mx =
      kernels::cpu::vec_math::max_of(logits.data(), static_cast<std::int64_t>(logits.size()));
  if (!std::isfinite(mx)) throw error("tf: sample() got no finite logit (max {})", mx);
  return mx;
}

/// Log-sum-exp of the raw logits (mx their largest), and in out.top the `k` most likely tokens
/// (ties to the lower id) with their logprobs: the model's own distribution, as OpenAI-style
/// APIs report it. `order` is scratch space.
inline double model_logprobs(std::span<float const> logits, float mx, int k,
                             std::vector<std::int32_t>& order, sample_result& out) {
  double const s =
      kernels::cpu::vec_math::sum_exp(logits.data(), static_cast<std::int64_t>(logits.size()), mx);
  double const lse = mx + std::log(s);
  if (k > 0) {
    auto const top = std::min<std::size_t>(static_cast<std::size_t>(k), logits.size());
    order.resize(logits.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    auto better = [&](std::int32_t a, std::int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top), order.end(),
                      better);
    out.top.clear();
    for (std::size_t i = 0; i < top; ++i)
      out.top.push_back({order[i], static_cast<float>(logits[order[i]] - lse)});
  }
  return lse;
}

}  // namespace detail

/// The model's logprob of a given `token` in a row of raw logits and its `top` most likely
/// alternatives, by the arithmetic sample() reports a sampled token's with: a prompt's tokens
/// scored here equal the same tokens sampled, bit for bit.
inline sample_result score_token(std::span<float const> logits, std::int32_t token, int top,
                                 std::vector<std::int32_t>& scratch) {
  if (token < 0 || static_cast<std::size_t>(token) >= logits.size())
    throw error("tf: token {} is outside a row of {} logits", token, logits.size());
  sample_result out;
  out.token = token;
  double const lse = detail::model_logprobs(logits, detail::finite_max(logits), top, scratch, out);
  out.logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  auto const above =
      std::count_if(logits.begin(), logits.end(), [v = logits[token]](float x) { return x > v; });
  out.rank = static_cast<std::int32_t>(above) + 1;
  return out;
}

/// Throws tf::error when a parameter is out of range.
inline void validate(sampling_params const& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    throw error("tf: sampling temperature {} must be finite and >= 0", p.temperature);
  if (p.top_k < 0) throw error("tf: sampling top_k {} must be >= 0", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    throw error("tf: sampling top_p {} must be in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    throw error("tf: sampling min_p {} must be in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    throw error("tf: repetition_penalty {} must be finite and > 0", p.repetition_penalty);
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
    throw error("tf: presence_penalty {} / frequency_penalty {} must be finite", p.presence_penalty,
                p.frequency_penalty);
  if (p.top_logprobs < 0) throw error("tf: top_logprobs {} must be >= 0", p.top_logprobs);
  for (auto const& b : p.logit_bias) {
    if (b.token < 0) throw error("tf: logit_bias names token {}, below 0", b.token);
    if (!std::isfinite(b.bias))
      throw error("tf: logit_bias for token {} is {}, not finite", b.token, b.bias);
  }
}

/// Samples tokens for one request; owns its PRNG so a seed gives the same stream every time,
/// whatever other requests do.
class sampler {
 public:
  explicit sampler(sampling_params p) : params_(p), rng_(p.seed) {
    validate(params_);
    if (params_.constraint) grammar_.emplace(params_.constraint);
  }

  sampling_params const& params() const { return params_; }

  /// A device can sample this request (kernels/portable/sample_math.hpp): no grammar, and no more
  /// top logprobs than the device reports.
  bool device_eligible() const {
    return !grammar_ && params_.top_logprobs <= kernels::portable::sample_math::max_top_logprobs;
  }

  /// The next token's row as a device samples it, in place of sample(): the params, this row's
  /// adjustments (appended to `adjust`, the row's range recorded) and the draw's uniform, taken
  /// from this request's stream exactly where sample() takes it, so both backends see one stream.
  kernels::portable::sample_math::row_params device_row(
      std::size_t vocab, std::span<std::int32_t const> history,
      std::vector<kernels::portable::sample_math::logit_adjust>& adjust) {
    if (!device_eligible()) throw error("tf: this request's sampling runs on the host");
    auto p = device_params();
    p.adjust_begin = static_cast<std::int32_t>(adjust.size());
    adjustments(history, vocab, adjust);
    p.adjust_count = static_cast<std::int32_t>(adjust.size()) - p.adjust_begin;
    p.penalty_count = static_cast<std::int32_t>(std::count_if(
        adjust.begin() + p.adjust_begin, adjust.end(), [](auto const& a) { return a.count > 0; }));
    if (params_.temperature != 0.0f) p.uniform = rng_.uniform();
    return p;
  }

  /// Picks the next token from `logits` [vocab]; `history` holds the tokens the penalties count.
  /// The order is: penalties, logit bias, grammar mask, temperature, top-k, top-p, min-p, then one
  /// draw.
  /// Logprobs are the model's own (before penalties and bias), as OpenAI-style APIs report them.
  sample_result sample(std::span<float const> logits, std::span<std::int32_t const> history = {}) {
    auto const n = logits.size();
    if (n == 0) throw error("tf: sample() got an empty logits row");
    if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
      throw error("tf: sample() got {} logits, more than an int32 token id can name", n);
    sample_result out;
    bool const want_logprob = params_.logprobs || params_.top_logprobs > 0;
    // Greedy and nothing to adjust: the logits as they are, without a copy.
    bool const as_is = params_.temperature == 0.0f && !penalised(history) &&
                       params_.logit_bias.empty() && !grammar_;
    float const mx = want_logprob || as_is ? finite_max(logits) : 0.0f;
    if (want_logprob) model_logprobs(logits, mx, out);

    if (as_is) {
      out.token = argmax(logits, mx);
    } else {
      work_.assign(logits.begin(), logits.end());
      adjust_.clear();
      adjustments(history, n, adjust_);
      auto const p = device_params();
      for (auto const& a : adjust_) {
        float& v = work_[static_cast<std::size_t>(a.token)];
        v = kernels::portable::sample_math::adjust(v, a, p);
      }
      if (grammar_) grammar_->mask(work_);
      out.token = params_.temperature == 0.0f ? argmax(work_) : draw();
    }
    out.logprob = want_logprob ? static_cast<float>(static_cast<double>(logits[out.token]) - lse_)
                               : std::numeric_limits<float>::quiet_NaN();
    if (grammar_) grammar_->accept(out.token);
    return out;
  }

 private:
  static float finite_max(std::span<float const> logits) { return detail::finite_max(logits); }

  void model_logprobs(std::span<float const> logits, float mx, sample_result& out) {
    lse_ = detail::model_logprobs(logits, mx, params_.top_logprobs, order_, out);
  }

  bool penalised(std::span<std::int32_t const> history) const {
    return !history.empty() &&
           (params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
            params_.frequency_penalty != 0.0f);
  }

  // The sampler's params as a device row (no adjustments, no uniform yet).
  kernels::portable::sample_math::row_params device_params() const {
    kernels::portable::sample_math::row_params p;
    p.temperature = params_.temperature;
    p.top_k = params_.top_k;
    p.top_p = params_.top_p;
    p.min_p = params_.min_p;
    p.repetition_penalty = params_.repetition_penalty;
    p.presence_penalty = params_.presence_penalty;
    p.frequency_penalty = params_.frequency_penalty;
    p.top_logprobs = params_.top_logprobs;
    p.logprob = params_.logprobs ? 1 : 0;
    return p;
  }

  // Appends the changes to a row of n logits, in the order they apply: a penalty per token seen
  // in the history (by token id), then each logit bias as the request lists it.
  void adjustments(std::span<std::int32_t const> history, std::size_t n,
                   std::vector<kernels::portable::sample_math::logit_adjust>& out) {
    if (penalised(history)) {
      counts_.clear();
      for (auto t : history) {
        if (t < 0 || static_cast<std::size_t>(t) >= n)
          throw error("tf: penalty history holds token {}, outside the vocabulary of {}", t, n);
        ++counts_[t];
      }
      auto const first = out.size();
      for (auto [t, c] : counts_) out.push_back({t, c, 0.0f});
      std::sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                [](auto const& a, auto const& b) { return a.token < b.token; });
    }
    for (auto const& b : params_.logit_bias) {
      if (static_cast<std::size_t>(b.token) >= n)
        throw error("tf: logit_bias names token {}, outside the vocabulary of {}", b.token, n);
      out.push_back({b.token, 0, b.bias});
    }
  }

  // The first index of the largest value (a tie goes to the lower index; NaNs never win, and
  // a NaN at index 0 stays the answer as no value compares greater than it).
  static std::int32_t argmax(std::span<float const> v) {
    if (v.empty()) return 0;
    return argmax(v, kernels::cpu::vec_math::max_of(v.data(), static_cast<std::int64_t>(v.size())));
  }

  // argmax with the largest value mx already known.
  static std::int32_t argmax(std::span<float const> v, float mx) {
    if (v.empty() || std::isnan(v[0])) return 0;
    std::size_t i = 0;
    while (i < v.size() && !(v[i] == mx)) ++i;
    return i < v.size() ? static_cast<std::int32_t>(i) : 0;
  }

  // One draw in the order kernels/portable/sample_math.hpp specifies: without a cut the whole
  // vocabulary in index order; with one the tokens ranked (w desc, index asc), cut by top-k, top-p
  // and min-p.
  std::int32_t draw() {
    namespace sm = kernels::portable::sample_math;
    auto const n = work_.size();
    float mx = -std::numeric_limits<float>::infinity();
    for (float v : work_) mx = sm::max_skip_nan(mx, v);
    if (!std::isfinite(mx)) throw error("tf: every logit is -inf after the penalties");
    double const inv_t = sm::inv_temperature(params_.temperature);
    probs_.resize(n);
    for (std::size_t i = 0; i < n; ++i) probs_[i] = sm::weight(work_[i], mx, inv_t);
    auto const vocab = static_cast<std::int64_t>(n);
    if (!sm::has_cut(params_.top_k, params_.top_p, params_.min_p, vocab)) {
      double total = 0.0;
      for (double e : probs_) total += e;
      double const u = sm::draw_point(rng_.uniform(), total);
      double c = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        c += probs_[i];
        if (u < c) return static_cast<std::int32_t>(i);
      }
      return static_cast<std::int32_t>(n - 1);
    }
    double z = 0.0;
    if (params_.top_p < 1.0f)
      for (double e : probs_) z += e;
    // Ranks as integers (the logit's order key, then the index), so the order is total.
    auto better = [&](std::int32_t a, std::int32_t b) {
      return sm::rank_key(work_[static_cast<std::size_t>(a)], a) >
             sm::rank_key(work_[static_cast<std::size_t>(b)], b);
    };
    order_.resize(n);
    for (std::size_t i = 0; i < n; ++i) order_[i] = static_cast<std::int32_t>(i);

    // Candidates best first: sort only as many as the cuts can keep, growing if needed.
    auto const keep = static_cast<std::size_t>(sm::kept(params_.top_k, vocab));
    double const mass = sm::top_p_mass(params_.top_p, z);
    double const floor = sm::min_p_floor(params_.min_p);
    std::size_t sorted = std::min<std::size_t>(keep, 64);
    for (;;) {
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(sorted),
                        order_.end(), better);
      if (sorted == keep) break;
      if (params_.top_p < 1.0f) {
        double c = 0.0;
        for (std::size_t i = 0; i < sorted; ++i) c += probs_[order_[i]];
        if (c >= mass) break;  // the nucleus ends inside the sorted prefix
      }
      if (params_.min_p > 0.0f && probs_[order_[sorted - 1]] < floor) break;
      sorted = std::min(keep, sorted * 4);
    }
    std::size_t m = sorted;
    if (params_.top_p < 1.0f) {
      double c = 0.0;
      std::size_t i = 0;
      for (; i < m; ++i) {
        c += probs_[order_[i]];
        if (c >= mass) break;
      }
      m = std::min(m, i + 1);
    }
    if (params_.min_p > 0.0f) {
      std::size_t i = 1;
      while (i < m && probs_[order_[i]] >= floor) ++i;
      m = i;
    }
    double total = 0.0;
    for (std::size_t i = 0; i < m; ++i) total += probs_[order_[i]];
    double const u = sm::draw_point(rng_.uniform(), total);
    double c = 0.0;
    for (std::size_t i = 0; i < m; ++i) {
      c += probs_[order_[i]];
      if (u < c) return order_[i];
    }
    return order_[m - 1];
  }

  sampling_params params_;
  rng rng_;
  std::optional<grammar::constraint_state> grammar_;
  double lse_ = 0.0;
  std::vector<float> work_;
  std::vector<double> probs_;
  std::vector<std::int32_t> order_;
  std::unordered_map<std::int32_t, int> counts_;
  std::vector<kernels::portable::sample_math::logit_adjust> adjust_;
};

}  // namespace tf::sample
