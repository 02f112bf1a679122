#pragma once
/// One forward's batch on the host: the rows checked against the KV store's shape and flattened
/// into per-token arrays, and the RoPE tables of its positions (the CPU backend's step, and what
/// the CUDA backend's step gathers on the host before its copies).
#include <tf/backend/backend.hpp>
#include <tf/backend/rope_angles.hpp>
#include <tf/batch.hpp>
#include <tf/error.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace tf::backend {

/// The flattened batch: token t's id, position and row; the tokens whose logits are wanted.
class host_step {
 public:
  /// Checks `rows` (throws tf::error for an empty batch or row, a negative start, a page table
  /// too short or pointing outside `num_pages`, a token outside the vocabulary) and gathers them.
  void gather(std::span<batch_row const> rows, kv_shape kv, std::int64_t vocab) {
    check(rows, kv, vocab);
    kv_ = kv;
    tok_.clear();
    pos_.clear();
    row_of_.clear();
    out_tok_.clear();
    tables_.clear();
    rows_.assign(rows.begin(), rows.end());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto const& row = rows[r];
      for (std::size_t i = 0; i < row.tokens.size(); ++i) {
        if (row.all_logits || i + 1 == row.tokens.size())
          out_tok_.push_back(static_cast<std::int64_t>(tok_.size()));
        tok_.push_back(row.tokens[i]);
        pos_.push_back(row.start_pos + static_cast<std::int32_t>(i));
        row_of_.push_back(static_cast<std::int32_t>(r));
      }
    }
  }

  /// Tokens in the batch.
  std::int64_t tokens() const { return static_cast<std::int64_t>(tok_.size()); }
  std::int32_t token(std::int64_t t) const { return tok_[static_cast<std::size_t>(t)]; }
  std::int32_t position(std::int64_t t) const { return pos_[static_cast<std::size_t>(t)]; }
  batch_row const& row_of(std::int64_t t) const {
    return rows_[static_cast<std::size_t>(row_of_[static_cast<std::size_t>(t)])];
  }
  std::span<batch_row const> rows() const { return rows_; }
  /// The tokens that want logits, in row order.
  std::span<std::int64_t const> logit_tokens() const { return out_tok_; }
  kv_shape kv() const { return kv_; }
  /// q, k and the attention probabilities are rounded to f16 where the cache holds f16, and the
  /// gelu takes llama.cpp's f16 table: its CPU path's numerics.
  bool f16_numerics() const { return kv_.dtype == kv_dtype::f16; }

  /// cos | sin [tokens, dims] of every token's angles under `p` (dims = the rotated width), built
  /// once per step and kind of layer.
  std::vector<float> const& rope_table(rope_params p, int dims) const {
    for (auto const& t : tables_)
      if (t.p.kind == p.kind && t.p.theta == p.theta && t.p.freq_scale == p.freq_scale &&
          t.p.rotated_pairs == p.rotated_pairs && t.dims == dims)
        return t.cs;
    auto& t = tables_.emplace_back(table{p, dims, {}});
    t.cs.resize(static_cast<std::size_t>(tokens() * dims));
    for (std::int64_t i = 0; i < tokens(); ++i) {
      float* c = t.cs.data() + i * dims;
      auto const pos = static_cast<double>(position(i));
      if (p.kind == rope_kind::neox)
        rope_neox_angles(pos, p.theta, dims, c, c + dims / 2, p.freq_scale);
      else
        rope_interleaved_angles(pos * static_cast<double>(p.freq_scale), p.theta, dims, c,
                                c + dims / 2);
      for (int j = p.rotated_pairs; p.rotated_pairs > 0 && j < dims / 2; ++j) {
        c[j] = 1.0f;  // an unrotated pair: angle 0
        c[dims / 2 + j] = 0.0f;
      }
    }
    return t.cs;
  }

 private:
  static void check(std::span<batch_row const> rows, kv_shape kv, std::int64_t vocab) {
    if (rows.empty()) throw error("tf: forward got an empty batch");
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto const& row = rows[r];
      if (row.tokens.empty()) throw error("tf: forward: batch row {} has no tokens", r);
      if (row.start_pos < 0)
        throw error("tf: forward: batch row {} starts at position {}", r, row.start_pos);
      std::int64_t const end =
          static_cast<std::int64_t>(row.start_pos) + static_cast<std::int64_t>(row.tokens.size());
      std::int64_t const pages_needed = (end + kv.page_tokens - 1) / kv.page_tokens;
      if (static_cast<std::int64_t>(row.page_table.size()) < pages_needed)
        throw error(
            "tf: forward: batch row {} reaches position {} and needs {} pages of {} tokens, its "
            "page table has {}",
            r, end - 1, pages_needed, kv.page_tokens, row.page_table.size());
      for (std::int64_t p = 0; p < pages_needed; ++p) {
        auto id = row.page_table[static_cast<std::size_t>(p)];
        if (id < 0 || id >= kv.num_pages)
          throw error("tf: forward: batch row {} page_table[{}] = {} is outside 0..{}", r, p, id,
                      kv.num_pages - 1);
      }
      if (row.state_slot >= kv.num_state_slots)
        throw error("tf: forward: batch row {} names state slot {} of {}", r, row.state_slot,
                    kv.num_state_slots);
      for (std::size_t i = 0; i < row.tokens.size(); ++i)
        if (row.tokens[i] < 0 || row.tokens[i] >= vocab)
          throw error("tf: forward: batch row {} token {} is {}, outside the vocabulary of {}", r,
                      i, row.tokens[i], vocab);
    }
  }

  struct table {
    rope_params p;
    int dims;
    std::vector<float> cs;
  };

  kv_shape kv_;
  std::vector<batch_row> rows_;
  std::vector<std::int32_t> tok_, pos_, row_of_;
  std::vector<std::int64_t> out_tok_;
  mutable std::vector<table> tables_;
};

}  // namespace tf::backend
