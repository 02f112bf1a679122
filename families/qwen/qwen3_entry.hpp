#pragma once
/// Qwen3's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/qwen/qwen3.hpp>
#include <families/qwen/qwen3_config.hpp>
#include <families/qwen/qwen3_forward.hpp>
#include <families/qwen/qwen3_load.hpp>

namespace tf::families::qwen {

struct qwen3_cpu_policy {
  using family = qwen3;
  using forward_type = qwen3_forward;
  static constexpr auto gguf_hparams = [](auto const& g) { return hparams_from_gguf(g); };
  static constexpr auto config_hparams = [](auto const& c) { return hparams_from_config(c); };
  static constexpr auto load = [](auto const& file) { return load_weights(file); };
};

struct qwen3_cpu : cpu_entry_of<qwen3_cpu_policy> {};

static_assert(cpu_entry<qwen3_cpu>);

}  // namespace tf::families::qwen
