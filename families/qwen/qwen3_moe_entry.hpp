#pragma once
/// Qwen3-MoE's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/qwen/qwen3_forward.hpp>
#include <families/qwen/qwen3_moe.hpp>
#include <families/qwen/qwen3_moe_config.hpp>
#include <families/qwen/qwen3_moe_load.hpp>

namespace tf::families::qwen {

using qwen3_moe_forward = basic_qwen3_forward<qwen3_moe_weights>;

struct qwen3_moe_cpu_policy {
  using family = qwen3_moe;
  using forward_type = qwen3_moe_forward;
  static constexpr auto gguf_hparams = [](auto const& g) { return moe_hparams_from_gguf(g); };
  static constexpr auto config_hparams = [](auto const& c) { return moe_hparams_from_config(c); };
  static constexpr auto load = [](auto const& file) { return load_moe_weights(file); };
};

struct qwen3_moe_cpu : cpu_entry_of<qwen3_moe_cpu_policy> {};

static_assert(cpu_entry<qwen3_moe_cpu>);

}  // namespace tf::families::qwen
