#pragma once
/// tf::loaded_model: a model opened through the registry, whatever its family and backend, with
/// its text codec and one stream for generate(); what a downstream project holds.
#include <tf/batch.hpp>
#include <tf/error.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/tokenizer/text_codec.hpp>

#include <algorithm>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf {

/// Why generate() stopped.
enum class stop_reason { length, end_of_generation, caller };

/// What generate() produced.
struct generation {
  std::vector<std::int32_t> tokens;
  stop_reason reason = stop_reason::length;
};

/// Called with each generated token; returning false stops the generation.
using token_callback = std::function<bool(sample::sample_result const&)>;

class loaded_model {
 public:
  virtual ~loaded_model() = default;

  virtual std::string_view family() const = 0;
  virtual std::string_view backend() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  /// The KV store of the one stream generate() runs.
  virtual kv_shape kv() const = 0;
  /// Bytes of its KV pages and recurrent-state slots as kv() sizes them: memory the stores take
  /// once written, which a budget read before then does not see yet.
  virtual std::uint64_t store_bytes() const = 0;
  /// Whether the model has recurrent layers: a stream's state cannot go back to an earlier
  /// position (a row at position 0 starts it afresh).
  virtual bool recurrent() const { return false; }
  /// Runs `rows` over this model's KV store (see tf::engine::forward).
  virtual void forward(std::span<batch_row const> rows, float* logits) = 0;
  /// Width of the final hidden state forward_hidden gives; 0 where the backend gives none.
  virtual std::int64_t hidden_size() const { return 0; }
  /// forward(), and every token's final hidden state [tokens, hidden_size()] into `hidden` (see
  /// tf::engine::forward); only where hidden_size() > 0.
  virtual void forward_hidden(std::span<batch_row const> rows, float* logits, float* hidden) {
    (void)rows, (void)logits, (void)hidden;
    throw error("tf: the '{}' model on {} gives no hidden states", family(), backend());
  }
  /// Runs `rows` and samples each logit row (see tf::engine::forward_sample): on the device where
  /// the backend can; this default copies the logits to the host for sampler::sample.
  virtual void forward_sample(std::span<batch_row const> rows,
                              std::span<sample::sampler* const> samplers,
                              std::span<std::span<std::int32_t const> const> histories,
                              std::span<sample::sample_result> out) {
    auto const vocab = static_cast<std::size_t>(vocab_size());
    std::vector<float> logits(samplers.size() * vocab);
    forward(rows, logits.data());
    for (std::size_t i = 0; i < samplers.size() && i < out.size(); ++i)
      out[i] = samplers[i]->sample(std::span<float const>(logits).subspan(i * vocab, vocab),
                                   histories[i]);
  }
  /// The context length the model was trained for (its file says so).
  virtual std::int64_t trained_context() const = 0;
  /// Gives generate() a window of `tokens` (a new KV store; a longer window costs memory).
  virtual void set_context(std::int32_t tokens) = 0;
  /// A new KV store for `streams` streams of `tokens` positions each (stream i owns the pages
  /// from i * ceil(tokens / page_tokens), and state slot i); generate() uses stream 0.
  virtual void set_streams(std::int32_t tokens, std::int32_t streams) = 0;

  /// The tokenizer and chat template, where the file carries a tokenizer.
  tokenizer::text_codec const* codec() const { return codec_ ? &*codec_ : nullptr; }
  tokenizer::text_codec const& text() const {
    if (!codec_) throw error("tf: this model file has no tokenizer: give token ids");
    return *codec_;
  }

  /// Prompt tokens per forward in generate().
  static constexpr std::size_t prefill_chunk = 512;

  /// Generates up to `max_tokens` after `prompt` in one stream (from position 0): each token goes
  /// to `on_token`; stops early at an end-of-generation token (not emitted; unless
  /// `stop_at_end` is false) or when `on_token` returns false.
  generation generate(std::span<std::int32_t const> prompt, sample::sampling_params const& sampling,
                      int max_tokens, token_callback const& on_token = {},
                      bool stop_at_end = true) {
    auto const kv = this->kv();
    std::int64_t const context = static_cast<std::int64_t>(kv.num_pages) * kv.page_tokens;
    if (prompt.empty()) throw error("tf: generate() got an empty prompt");
    if (max_tokens < 0) throw error("tf: generate() asks for {} tokens", max_tokens);
    if (static_cast<std::int64_t>(prompt.size()) + max_tokens > context)
      throw error("tf: {} prompt tokens + {} to generate pass the context of {}", prompt.size(),
                  max_tokens, context);
    sample::sampler sampler(sampling);
    std::vector<std::int32_t> pages(static_cast<std::size_t>(kv.num_pages));
    for (std::size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<std::int32_t>(i);
    std::vector<std::int32_t> history(prompt.begin(), prompt.end());
    std::int32_t const slot = kv.num_state_slots > 0 ? 0 : -1;
    sample::sampler* const samplers[1] = {&sampler};
    sample::sample_result next;
    // Each forward samples its row at once: the history is what it holds at that token.
    auto feed = [&](std::span<std::int32_t const> tokens, std::int32_t pos) {
      batch_row row{tokens, pos, pages, false, slot};
      std::span<std::int32_t const> const h = history;
      forward_sample({&row, 1}, samplers, {&h, 1}, {&next, 1});
    };
    // The prompt in chunks, as llama.cpp's micro-batches: a chunk's activations stay in the
    // caches, and a row's bits do not depend on its chunk. Only the last chunk samples.
    std::vector<float> unused;
    std::size_t at = 0;
    for (; prompt.size() - at > prefill_chunk; at += prefill_chunk) {
      unused.resize(static_cast<std::size_t>(vocab_size()));
      batch_row row{prompt.subspan(at, prefill_chunk), static_cast<std::int32_t>(at), pages, false,
                    slot};
      forward({&row, 1}, unused.data());
    }
    feed(prompt.subspan(at), static_cast<std::int32_t>(at));
    generation out;
    auto const stops = codec_ && stop_at_end ? codec_->stop_tokens() : std::vector<std::int32_t>{};
    for (int i = 0; i < max_tokens; ++i) {
      auto r = std::move(next);
      if (std::find(stops.begin(), stops.end(), r.token) != stops.end()) {
        out.reason = stop_reason::end_of_generation;
        return out;
      }
      out.tokens.push_back(r.token);
      history.push_back(r.token);
      if (on_token && !on_token(r)) {
        out.reason = stop_reason::caller;
        return out;
      }
      if (i + 1 < max_tokens)
        feed({&history.back(), 1}, static_cast<std::int32_t>(history.size() - 1));
    }
    return out;
  }

  /// The same for prompt text (encoded with BOS as the vocabulary asks).
  generation generate(std::string const& prompt, sample::sampling_params const& sampling,
                      int max_tokens, token_callback const& on_token = {}) {
    auto const ids = text().encode(prompt);
    return generate(std::span<std::int32_t const>(ids), sampling, max_tokens, on_token);
  }

 protected:
  std::optional<tokenizer::text_codec> codec_;
};

}  // namespace tf
