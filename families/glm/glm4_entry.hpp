#pragma once
/// GLM-4 dense's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/glm/glm4.hpp>
#include <families/glm/glm4_config.hpp>
#include <families/glm/glm4_forward.hpp>
#include <families/glm/glm4_load.hpp>

namespace tf::families::glm {

struct glm4_cpu_policy {
  using family = glm4;
  using forward_type = glm4_forward;
  static constexpr auto gguf_hparams = [](auto const& g) { return hparams_from_gguf(g); };
  static constexpr auto config_hparams = [](auto const& c) { return hparams_from_config(c); };
  static constexpr auto load = [](auto const& file) { return load_weights(file); };
};

struct glm4_cpu : cpu_entry_of<glm4_cpu_policy> {};

static_assert(cpu_entry<glm4_cpu>);

}  // namespace tf::families::glm
