#pragma once
/// tf::mtp_head: a checkpoint's multi-token-prediction head (Qwen3.5 / Qwen3-Next mtp.*, GLM-4.5's
/// next-n layer): from the target's final hidden state at position p and the token at p + 1 it
/// gives logits for the token at p + 2, and its own hidden state, which its next step reads in
/// place of the target's. It keeps its own KV store (its layer attends over the positions it ran).
#include <tf/batch.hpp>

#include <cstdint>
#include <span>

namespace tf {

class mtp_head {
 public:
  virtual ~mtp_head() = default;
  virtual std::int64_t hidden_size() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  /// A new KV store: `streams` streams of `tokens` positions (stream i owns the pages from
  /// i * ceil(tokens / page_tokens)).
  virtual void set_streams(std::int32_t tokens, std::int32_t streams) = 0;
  virtual kv_shape kv() const = 0;
  /// Bytes of its KV store as kv() sizes it (memory it takes once written).
  virtual std::uint64_t store_bytes() const = 0;
  /// Bytes of weights it holds in memory of its own (a device's copies); 0 where they are views
  /// of the model file the target maps, already counted with the target's weights.
  virtual std::uint64_t weight_bytes() const { return 0; }
  /// Runs `rows`: row r's token j is the token at position start_pos + j + 1, read with
  /// hidden[token index] [tokens of all rows, hidden_size()], the hidden state of position
  /// start_pos + j. Writes logits [logits_rows(rows), vocab_size()] and, when `hidden_out` is
  /// given, every token's own hidden state [tokens, hidden_size()].
  virtual void forward(std::span<batch_row const> rows, float const* hidden, float* logits,
                       float* hidden_out) = 0;
};

}  // namespace tf
