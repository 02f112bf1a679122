#pragma once
/// Gemma 3's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/gemma/gemma3.hpp>
#include <families/gemma/gemma3_config.hpp>
#include <families/gemma/gemma3_forward.hpp>
#include <families/gemma/gemma3_load.hpp>

namespace tf::families::gemma {

struct gemma3_cpu_policy {
  using family = gemma3;
  using forward_type = gemma3_forward;  // keeps K and V for every layer, sliding layers too
  static constexpr auto gguf_hparams = [](auto const& g) { return hparams_from_gguf(g); };
  static constexpr auto config_hparams = [](auto const& c) { return hparams_from_config(c); };
  static constexpr auto load = [](auto const& file) { return load_weights(file); };
};

struct gemma3_cpu : cpu_entry_of<gemma3_cpu_policy> {};

static_assert(cpu_entry<gemma3_cpu>);

}  // namespace tf::families::gemma
