#pragma once
/// One forward's batch on a CUDA device: the CPU backend's checked, flattened batch, with the
/// per-token arrays the kernels read (token ids, positions, page tables, logit rows) and the RoPE
/// tables copied to the device once per step.
#include <kernels/cuda/launch.hpp>
#include <tf/backend/backend.hpp>
#include <tf/backend/cuda/device.hpp>
#include <tf/backend/host_step.hpp>
#include <tf/batch.hpp>

#include <cstdint>
#include <span>
#include <vector>

namespace tf::backend::cuda_parts {

class step {
 public:
  /// Checks and gathers `rows` as the CPU backend does, then copies the kernels' arrays.
  void gather(std::span<batch_row const> rows, kv_shape kv, std::int64_t vocab) {
    host_.gather(rows, kv, vocab);
    std::vector<std::int64_t> table;
    std::vector<std::int32_t> pages;
    table.reserve(static_cast<std::size_t>(tokens()));
    for (auto const& r : host_.rows()) {
      auto const first = static_cast<std::int64_t>(pages.size());
      pages.insert(pages.end(), r.page_table.begin(), r.page_table.end());
      table.insert(table.end(), r.tokens.size(), first);
    }
    std::vector<std::int32_t> tok(static_cast<std::size_t>(tokens())),
        pos(static_cast<std::size_t>(tokens()));
    for (std::int64_t t = 0; t < tokens(); ++t) {
      tok[static_cast<std::size_t>(t)] = host_.token(t);
      pos[static_cast<std::size_t>(t)] = host_.position(t);
    }
    tokens_.upload(tok.data(), tok.size());
    pos_.upload(pos.data(), pos.size());
    table_.upload(table.data(), table.size());
    pages_.upload(pages.data(), pages.size());
    auto const out = host_.logit_tokens();
    logit_rows_.upload(out.data(), out.size());
    tables_.clear();
  }

  std::int64_t tokens() const { return host_.tokens(); }
  std::span<batch_row const> rows() const { return host_.rows(); }
  std::span<std::int64_t const> logit_tokens() const { return host_.logit_tokens(); }
  kv_shape kv() const { return host_.kv(); }
  host_step const& host() const { return host_; }

  std::int32_t const* device_tokens() const { return tokens_.data(); }
  std::int64_t const* device_logit_rows() const { return logit_rows_.data(); }
  kernels::cuda::token_places places() const { return {pos_.data(), table_.data(), pages_.data()}; }

  /// cos | sin [tokens, dims] of every token's angles under `p`, on the device; the host computes
  /// them as the CPU backend does, so both backends rotate by the same angles.
  float const* rope_table(rope_params p, int dims) const {
    for (auto const& t : tables_)
      if (t.p.kind == p.kind && t.p.theta == p.theta && t.p.freq_scale == p.freq_scale &&
          t.p.rotated_pairs == p.rotated_pairs && t.dims == dims)
        return t.cs.data();
    auto const& cs = host_.rope_table(p, dims);
    auto& t = tables_.emplace_back(table{p, dims, {}});
    t.cs.upload(cs.data(), cs.size());
    return t.cs.data();
  }

 private:
  struct table {
    rope_params p;
    int dims;
    device_array<float> cs;
  };

  host_step host_;
  device_array<std::int32_t> tokens_, pos_, pages_;
  device_array<std::int64_t> table_, logit_rows_;
  mutable std::vector<table> tables_;
};

}  // namespace tf::backend::cuda_parts
