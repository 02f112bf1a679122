#pragma once
/// tf::target_kv_head: a drafter that keeps no KV of its own and attends over the target's (Gemma
/// 4's assistant). From the target's final hidden state at position p - 1 (or its own from the
/// step before) and the token at p, it gives logits for the token after and the hidden state its
/// next step reads, attending over the target's KV of the positions before p.
#include <tf/batch.hpp>

#include <cstdint>
#include <span>

namespace tf {

class target_kv_head {
 public:
  virtual ~target_kv_head() = default;
  /// The width of the hidden states it reads and writes: the target's hidden size.
  virtual std::int64_t hidden_size() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  /// Bytes of weights it holds in memory of its own (a device's copies); 0 where they are views
  /// of its mapped file.
  virtual std::uint64_t weight_bytes() const { return 0; }
  /// Runs `rows`, one token each: row r's token at rows[r].start_pos reads hidden[r]
  /// [rows, hidden_size()] and the target's KV of the positions before it through the row's page
  /// table (which covers them). Writes logits [rows, vocab_size()] and, when `hidden_out` is
  /// given, each row's next hidden state [rows, hidden_size()].
  virtual void forward(std::span<batch_row const> rows, float const* hidden, float* logits,
                       float* hidden_out) = 0;
};

}  // namespace tf
