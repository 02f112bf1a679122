#pragma once
/// GLM-4 dense (glm4): the family's traits. Its forward is glm4_model.hpp.
#include <families/glm/glm4_model.hpp>
#include <tf/family.hpp>

#include <array>
#include <string_view>

namespace tf::families::glm {

struct glm4 {
  static constexpr std::string_view name = "glm4";
  static constexpr std::array<std::string_view, 1> arch_names{"glm4"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = glm4_hparams;
  template <class B>
  using model = glm4_model<B>;
};

}  // namespace tf::families::glm
