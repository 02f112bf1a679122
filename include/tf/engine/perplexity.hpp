#pragma once
/// tf::perplexity: llama-perplexity's two measures over a token sequence, its windows run as a
/// batch of streams. Every logit row is the one a stream alone would get, and the sums run in
/// window and position order, so the result has the same bits at any thread count or batch.
#include <tf/batch.hpp>
#include <tf/engine/loaded_model.hpp>
#include <tf/error.hpp>
#include <tf/sample/sampler.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace tf {

struct perplexity_options {
  std::int32_t context = 512;  // tokens per window (llama-perplexity's -c)
  // 0: windows of `context` side by side, each scoring its second half (llama-perplexity's
  // default); > 0: windows every `stride` tokens, each scoring its last `stride` tokens
  // (its --ppl-stride).
  std::int32_t stride = 0;
  std::int32_t chunks = -1;              // windows to run at most; -1: all
  std::int32_t streams = 4;              // windows run as one batch
  std::int32_t bos = -1;                 // >= 0: a window without stride starts with this token
  std::size_t logits_bytes = 64u << 20;  // the logits rows one forward may write
};

struct perplexity_result {
  double ppl = 0.0;
  double ppl_error = 0.0;  // the standard error of ppl (llama-perplexity's "+/-")
  double nll = 0.0;        // the sum of -log p over the scored tokens
  std::int64_t count = 0;  // scored tokens
  std::int32_t windows = 0;
};

namespace detail {

/// One window: `tokens` from position 0, scoring the predictions of positions [first, end).
struct ppl_window {
  std::vector<std::int32_t> tokens;
  std::int32_t first = 0;
};

inline std::vector<ppl_window> ppl_windows(std::span<std::int32_t const> tokens,
                                           perplexity_options const& o) {
  auto const n = static_cast<std::int64_t>(tokens.size());
  if (o.context < 2) throw error("tf: perplexity needs a context of at least 2, got {}", o.context);
  if (n < 2 * static_cast<std::int64_t>(o.context))
    throw error("tf: perplexity over a context of {} needs at least {} tokens, got {}", o.context,
                2 * o.context, n);
  if (o.stride < 0 || o.stride >= o.context)
    throw error("tf: the perplexity stride {} must be in [0, context {})", o.stride, o.context);
  std::int64_t const ctx = o.context;
  std::int64_t count = o.stride == 0 ? n / ctx : (n - ctx + o.stride - 1) / o.stride;
  if (o.chunks >= 0) count = std::min<std::int64_t>(count, o.chunks);
  std::vector<ppl_window> out;
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t const start = o.stride == 0 ? i * ctx : i * o.stride;
    ppl_window w;
    w.tokens.assign(tokens.begin() + start, tokens.begin() + start + ctx);
    // llama-perplexity starts each side-by-side window with BOS, and scores its second half.
    if (o.stride == 0 && o.bos >= 0) w.tokens[0] = o.bos;
    w.first = static_cast<std::int32_t>(o.stride == 0 ? ctx / 2 : ctx - o.stride - 1);
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace detail

/// Runs llama-perplexity's measure over `tokens` on `model` (its KV store is replaced by one for
/// `o.streams` windows); `on_window(i, running ppl)` after each window in order.
inline perplexity_result perplexity(
    loaded_model& model, std::span<std::int32_t const> tokens, perplexity_options const& o,
    std::function<void(std::int32_t, double)> const& on_window = {}) {
  auto const windows = detail::ppl_windows(tokens, o);
  auto const vocab = static_cast<std::size_t>(model.vocab_size());
  auto const streams = static_cast<std::size_t>(
      std::clamp<std::int64_t>(o.streams, 1, std::max<std::size_t>(1, windows.size())));
  model.set_streams(o.context, static_cast<std::int32_t>(streams));
  auto const kv = model.kv();
  auto const pages_per =
      static_cast<std::size_t>((o.context + kv.page_tokens - 1) / kv.page_tokens);
  std::vector<std::int32_t> pages(static_cast<std::size_t>(kv.num_pages));
  for (std::size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<std::int32_t>(i);
  auto const table = [&](std::size_t s) {
    return std::span<std::int32_t const>(pages).subspan(s * pages_per, pages_per);
  };
  auto const state = [&](std::size_t s) {
    return kv.num_state_slots > 0 ? static_cast<std::int32_t>(s) : -1;
  };
  // Scored positions per window per forward, so the logits stay within logits_bytes.
  auto const step = std::max<std::size_t>(1, o.logits_bytes / (vocab * sizeof(float) * streams));

  perplexity_result r;
  double nll2 = 0.0;
  std::vector<float> logits;
  std::vector<batch_row> rows;
  std::vector<std::int32_t> scratch;
  for (std::size_t g = 0; g < windows.size(); g += streams) {
    auto const group = std::span(windows).subspan(g, std::min(streams, windows.size() - g));
    // The unscored head of every window, one row each, then the scored rest in steps.
    rows.clear();
    for (std::size_t s = 0; s < group.size() && group[s].first > 0; ++s)
      rows.push_back({std::span<std::int32_t const>(group[s].tokens)
                          .first(static_cast<std::size_t>(group[s].first)),
                      0, table(s), false, state(s)});
    if (!rows.empty()) {
      logits.resize(rows.size() * vocab);
      model.forward(rows, logits.data());
    }
    // Each window's nll, summed in position order, then added in window order.
    std::vector<double> window_nll(group.size(), 0.0), window_nll2(group.size(), 0.0);
    std::vector<std::int64_t> window_count(group.size(), 0);
    auto const ctx = static_cast<std::size_t>(o.context);
    for (std::size_t at = static_cast<std::size_t>(group[0].first); at < ctx - 1; at += step) {
      auto const n = std::min(step, ctx - 1 - at);
      rows.clear();
      for (std::size_t s = 0; s < group.size(); ++s)
        rows.push_back({std::span<std::int32_t const>(group[s].tokens).subspan(at, n),
                        static_cast<std::int32_t>(at), table(s), true, state(s)});
      logits.resize(rows.size() * n * vocab);
      model.forward(rows, logits.data());
      for (std::size_t s = 0; s < group.size(); ++s)
        for (std::size_t j = 0; j < n; ++j) {
          auto const row = std::span<float const>(logits).subspan((s * n + j) * vocab, vocab);
          auto const lp = sample::score_token(row, group[s].tokens[at + j + 1], 0, scratch).logprob;
          double const v = -static_cast<double>(lp);
          window_nll[s] += v;
          window_nll2[s] += v * v;
          ++window_count[s];
        }
    }
    for (std::size_t s = 0; s < group.size(); ++s) {
      r.nll += window_nll[s];
      nll2 += window_nll2[s];
      r.count += window_count[s];
      ++r.windows;
      if (on_window) on_window(r.windows, std::exp(r.nll / static_cast<double>(r.count)));
    }
  }
  if (r.count == 0) throw error("tf: perplexity scored no tokens");
  double const mean = r.nll / static_cast<double>(r.count);
  r.ppl = std::exp(mean);
  double const var = nll2 / static_cast<double>(r.count) - mean * mean;
  if (var > 0.0 && r.count > 1)
    r.ppl_error = std::sqrt(var / static_cast<double>(r.count - 1)) * r.ppl;
  return r;
}

}  // namespace tf
