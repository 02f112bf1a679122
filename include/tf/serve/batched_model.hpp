#pragma once
/// What the lane host asks of a model: one batched forward over paged KV storage and, for a pool
/// with recurrent-state slots, the slots' count, size and copy; and the pool config built from it.
#include <tf/batch.hpp>
#include <tf/kv/hybrid_pool.hpp>
#include <tf/kv/paged_pool.hpp>
#include <tf/sample/sampler.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace tf::serve {

using tf::batch_row;

/// A model the lane host can drive: a paged KV pool and one forward over many rows at once.
/// forward() writes, row after row, one [vocab] logits row (or one per token with all_logits);
/// copy_page(from, to) makes page `to` hold page `from`'s K and V (a shared page a stream
/// writes into is copied first).
template <class M>
concept batched_model = requires(M& m, std::span<batch_row const> rows, float* logits,
                                 std::int32_t page) {
  { m.vocab_size() } -> std::convertible_to<std::size_t>;
  { m.page_tokens() } -> std::convertible_to<std::size_t>;
  { m.num_pages() } -> std::convertible_to<std::size_t>;
  m.forward(rows, logits);
  m.copy_page(page, page);
};

/// A batched model that samples as it runs (tf::engine::forward_sample): row i's logits go to
/// samplers[i] with histories[i], on the device where the backend can; the lane host uses it
/// where a model has it, and forward() then sampler::sample otherwise.
template <class M>
concept sampling_model = batched_model<M> &&
    requires(M& m, std::span<batch_row const> rows, std::span<sample::sampler* const> samplers,
             std::span<std::span<std::int32_t const> const> histories,
             std::span<sample::sample_result> out) {
  m.forward_sample(rows, samplers, histories, out);
};

/// A batched model with recurrent-state slots (a ledgerPool family with slots). Its forward
/// starts a row's slot from zero at start_pos 0 and continues the slot's state past it;
/// copy_state(from, to) makes slot `to` hold slot `from`'s state.
template <class M>
concept stateful_model = batched_model<M> && requires(M& m, std::int32_t slot) {
  { m.num_state_slots() } -> std::convertible_to<std::size_t>;
  { m.state_bytes() } -> std::convertible_to<std::size_t>;
  m.copy_state(slot, slot);
};

/// A pool that gives each stream a recurrent-state slot.
template <class P>
concept pool_with_state_slots = requires(P const& p, typename P::stream_id id) {
  { p.stream_slot(id) } -> std::convertible_to<std::optional<std::int32_t>>;
};

/// The pages every pool config starts from: the model's page size and count.
template <batched_model M>
kv::pool_config page_config(M const& m) {
  return {static_cast<std::int64_t>(m.page_tokens()), static_cast<std::int64_t>(m.num_pages()), 0,
          1};
}

/// Builds `Pool::config` from the model and the slots the pool gets; a family with its own
/// ledgerPool specializes this for its pool.
template <class Pool>
struct pool_config_from;

template <>
struct pool_config_from<kv::paged_pool> {
  template <batched_model M>
  static kv::pool_config make(M const& m, std::int64_t /*slots*/) {
    return page_config(m);
  }
};

template <>
struct pool_config_from<kv::hybrid_pool> {
  template <stateful_model M>
  static kv::hybrid_config make(M const& m, std::int64_t slots) {
    return {page_config(m), slots, static_cast<std::int64_t>(m.state_bytes())};
  }
};

/// `Pool`'s config can be built from `M` (pool_config_from<Pool> exists and takes M).
template <class M, class Pool>
concept configures_pool = requires(M const& m) {
  pool_config_from<Pool>::make(m, std::int64_t{0});
};

/// The lane host can drive `M` over `Pool`: a pool with state slots needs a stateful model.
template <class M, class Pool>
concept drives_pool = batched_model<M> && configures_pool<M, Pool> &&
    (!pool_with_state_slots<Pool> || stateful_model<M>);

}  // namespace tf::serve
