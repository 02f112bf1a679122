#pragma once
/// What a family gives tf-generate and serve to run it on the CPU: a forward over batch rows,
/// and how to build that forward from an open model file.
#include <families/common/forward_rows.hpp>
#include <tf/model/model_file.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace tf::families {

/// A batched CPU forward: logits [logits_rows(rows), vocab_size()] for rows over paged KV.
template <class F>
concept cpu_forward = requires(F& f, std::span<batch_row const> rows, float* logits) {
  { f.vocab_size() } -> std::convertible_to<std::int64_t>;
  { F::logits_rows(rows) } -> std::convertible_to<std::int64_t>;
  f.forward(rows, logits);
};

/// A family's CPU entry. `family` is its traits type; `make` binds the weights of `file`, which
/// must outlive the forward (matrices point into its mapping); `kv_bytes_per_token` is what one
/// position costs in KV storage of `dtype`, so the memory budget can size the pool before anything
/// is allocated.
template <class E>
concept cpu_entry = requires(model::model_file const& file, kv_shape kv, int threads,
                             std::string_view arch) {
  typename E::forward_type;
  typename E::family;  // the traits type (kvPool/ledgerPool) the lane host admits through
  requires cpu_forward<typename E::forward_type>;
  { E::name } -> std::convertible_to<std::string_view>;
  { E::accepts(arch) } -> std::same_as<bool>;
  { E::kv_bytes_per_token(file, kv.dtype) } -> std::convertible_to<std::uint64_t>;
  { E::context_length(file) } -> std::convertible_to<std::int64_t>;
  { E::make(file, kv, threads) } -> std::same_as<std::unique_ptr<typename E::forward_type>>;
};

/// Bytes per position of K and V for `layers` layers of `kv_heads` x `head_dim`.
constexpr std::uint64_t kv_bytes(int layers, int kv_heads, int head_dim, kv_dtype dtype) {
  return 2ull * static_cast<std::uint64_t>(layers) * static_cast<std::uint64_t>(kv_heads) *
         static_cast<std::uint64_t>(head_dim) * (dtype == kv_dtype::f32 ? 4u : 2u);
}

/// A family's CPU entry from a policy `P`, which names
///   `family`        the traits type: its `name`, its `arch_names` (what `accepts`), its pool;
///   `forward_type`  the CPU forward, built from (weights, kv_shape, threads);
///   `gguf_hparams`, `config_hparams`  callables reading the hparams (with num_layers,
///                   num_kv_heads, head_dim, context_length) from GGUF metadata or config.json;
///   `load`          a callable binding the weights of a model_file.
/// KV holds K and V of head_dim for every layer and KV head.
template <class P>
struct cpu_entry_of {
  using forward_type = typename P::forward_type;
  using family = typename P::family;
  static constexpr std::string_view name = family::name;

  static bool accepts(std::string_view arch) {
    return std::ranges::find(family::arch_names, arch) != family::arch_names.end();
  }
  static auto hparams(model::model_file const& file) {
    if (auto const* g = file.gguf()) return P::gguf_hparams(*g);
    return P::config_hparams(file.hf()->config());
  }
  static std::uint64_t kv_bytes_per_token(model::model_file const& file, kv_dtype dtype) {
    auto const hp = hparams(file);
    return kv_bytes(hp.num_layers, hp.num_kv_heads, hp.head_dim, dtype);
  }
  static std::int64_t context_length(model::model_file const& file) {
    return hparams(file).context_length;
  }
  static std::unique_ptr<forward_type> make(model::model_file const& file, kv_shape kv,
                                            int threads) {
    return std::make_unique<forward_type>(P::load(file), kv, threads);
  }
};

}  // namespace tf::families
