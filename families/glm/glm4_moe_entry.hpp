#pragma once
/// GLM-4.5 MoE's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/glm/glm4_moe.hpp>
#include <families/glm/glm4_moe_config.hpp>
#include <families/glm/glm4_moe_forward.hpp>
#include <families/glm/glm4_moe_weights.hpp>

namespace tf::families::glm {

struct glm4_moe_cpu_policy {
  using family = glm4_moe;
  using forward_type = glm4_moe_forward;
  static constexpr auto gguf_hparams = [](auto const& g) { return moe_hparams_from_gguf(g); };
  static constexpr auto config_hparams = [](auto const& c) { return moe_hparams_from_config(c); };
  static constexpr auto load = [](auto const& file) { return load_moe_weights(file); };
};

struct glm4_moe_cpu : cpu_entry_of<glm4_moe_cpu_policy> {};

static_assert(cpu_entry<glm4_moe_cpu>);

}  // namespace tf::families::glm
