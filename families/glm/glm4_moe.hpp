#pragma once
/// GLM-4.5 MoE (glm4_moe / GGUF glm4moe): the family's traits. Its forward is glm4_moe_model.hpp.
#include <families/glm/glm4_moe_model.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/family.hpp>

#include <array>
#include <string_view>

namespace tf::families::glm {

struct glm4_moe {
  static constexpr std::string_view name = "glm4_moe";
  static constexpr std::array<std::string_view, 2> arch_names{"glm4_moe", "glm4moe"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  using backend_needs = tf::backend::needs<tf::backend::routed_experts>;
  static constexpr bool per_request_admission = true;
  using hparams = glm4_moe_hparams;
  template <class B>
  using model = glm4_moe_model<B>;
};

}  // namespace tf::families::glm
