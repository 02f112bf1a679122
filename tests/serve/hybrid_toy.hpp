#pragma once
/// Test helper: a deterministic hybrid toy model (an attention-like hash kept per position in its
/// KV pages, plus a recurrent state per slot) and its ledgerPool family, for the lane host.
#include "toy_model.hpp"

#include <tf/batch.hpp>
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/kv/hybrid_pool.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

namespace tf::serve {

/// The hybrid toy's family traits: KV pages and recurrent-state slots, counted by the ledger.
struct hybrid_toy_family {
  static constexpr std::string_view name = "hybrid-toy";
  static constexpr std::array<std::string_view, 1> arch_names{"tf-hybrid-toy"};
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  static constexpr bool per_request_admission = true;
  static constexpr bool has_forward = true;
  struct hparams {};
};

/// Logits come from the position's page hash mixed with the row's slot state, so a wrong page
/// table, position, slot or state (a missing copy, a state past the prompt) changes the reply.
class hybrid_toy_model {
 public:
  using state = std::array<std::uint64_t, 4>;

  hybrid_toy_model(std::size_t num_pages, std::size_t page_tokens, std::size_t num_slots,
                   std::chrono::microseconds delay = std::chrono::microseconds(0))
      : pages_(num_pages),
        page_tokens_(page_tokens),
        delay_(delay),
        hashes_(num_pages * page_tokens, 0),
        states_(num_slots, state{}) {}

  std::size_t vocab_size() const { return toy_vocab::size; }
  std::size_t page_tokens() const { return page_tokens_; }
  std::size_t num_pages() const { return pages_; }
  std::size_t num_state_slots() const { return states_.size(); }
  std::size_t state_bytes() const { return sizeof(state); }

  void copy_state(std::int32_t from, std::int32_t to) {
    check_slot(from);
    check_slot(to);
    ++copies_;
    if (!drop_copies)
      states_[static_cast<std::size_t>(to)] = states_[static_cast<std::size_t>(from)];
  }

  /// Page `to` takes page `from`'s hashes.
  void copy_page(std::int32_t from, std::int32_t to) {
    if (from < 0 || to < 0 || static_cast<std::size_t>(from) >= pages_ ||
        static_cast<std::size_t>(to) >= pages_)
      throw error("tf: hybrid toy model: page copy {} -> {} outside the pool of {}", from, to,
                  pages_);
    std::copy_n(
        hashes_.begin() +
            static_cast<std::ptrdiff_t>(static_cast<std::size_t>(from) * page_tokens_),
        page_tokens_,
        hashes_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(to) * page_tokens_));
  }

  /// A broken model for negative tests: copy_state does nothing.
  bool drop_copies = false;
  std::uint64_t copies() const { return copies_; }
  std::uint64_t forward_calls() const { return calls_; }

  void forward(std::span<batch_row const> rows, float* logits) {
    ++calls_;
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    for (auto const& row : rows) {
      check_slot(row.state_slot);
      auto& s = states_[static_cast<std::size_t>(row.state_slot)];
      if (row.start_pos == 0) s = state{};  // a new stream's state starts from zero
      for (std::size_t i = 0; i < row.tokens.size(); ++i) {
        auto const pos = static_cast<std::size_t>(row.start_pos) + i;
        auto tok = row.tokens[i];
        if (tok < 0 || static_cast<std::size_t>(tok) >= toy_vocab::size)
          throw error("tf: hybrid toy model got token {} outside its vocabulary", tok);
        auto const t = static_cast<std::uint64_t>(tok) + 1;
        std::uint64_t prev = pos == 0 ? 0x9e3779b97f4a7c15ull : hash(row, pos - 1);
        hash(row, pos) = toy_mix(prev ^ t * 0xff51afd7ed558ccdull);
        // The recurrent part: every token moves all of the state.
        s[0] = toy_mix(s[0] + t * 0xd6e8feb86659fd93ull);
        s[1] = toy_mix(s[1] ^ s[0]);
        s[2] = s[2] * 31 + t;
        s[3] = toy_mix(s[3] + s[1] + s[2]);
        if (row.all_logits || i + 1 == row.tokens.size()) {
          toy_logits(toy_mix(hash(row, pos) ^ s[3]), logits);
          logits += toy_vocab::size;
        }
      }
    }
  }

 private:
  void check_slot(std::int32_t slot) const {
    if (slot < 0 || static_cast<std::size_t>(slot) >= states_.size())
      throw error("tf: hybrid toy model: state slot {} outside its {} slots", slot, states_.size());
  }

  std::uint64_t& hash(batch_row const& row, std::size_t pos) {
    auto const page = pos / page_tokens_;
    if (page >= row.page_table.size())
      throw error("tf: hybrid toy model: position {} needs page {} of a {}-page table", pos, page,
                  row.page_table.size());
    auto const id = row.page_table[page];
    if (id < 0 || static_cast<std::size_t>(id) >= pages_)
      throw error("tf: hybrid toy model: page id {} outside the pool of {}", id, pages_);
    return hashes_[static_cast<std::size_t>(id) * page_tokens_ + pos % page_tokens_];
  }

  std::size_t pages_, page_tokens_;
  std::chrono::microseconds delay_;
  std::vector<std::uint64_t> hashes_;  // [num_pages, page_tokens]
  std::vector<state> states_;          // [num_slots]
  std::uint64_t calls_ = 0, copies_ = 0;
};

}  // namespace tf::serve
