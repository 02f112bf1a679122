#pragma once
/// Qwen3-MoE (qwen3moe / qwen3_moe): the family's traits. The attention is Qwen3's; MoE layers
/// route each token to top-k of num_experts SwiGLU experts. Its forward is qwen3_moe_model.hpp.
#include <families/qwen/qwen3_moe_model.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/family.hpp>

#include <array>
#include <string_view>

namespace tf::families::qwen {

struct qwen3_moe {
  static constexpr std::string_view name = "qwen3_moe";
  static constexpr std::array<std::string_view, 2> arch_names{"qwen3moe", "qwen3_moe"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  using backend_needs = tf::backend::needs<tf::backend::routed_experts>;
  static constexpr bool per_request_admission = true;
  using hparams = qwen3_moe_hparams;
  template <class B>
  using model = qwen3_moe_model<B>;
};

}  // namespace tf::families::qwen
