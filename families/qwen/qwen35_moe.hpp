#pragma once
/// Qwen3.5-MoE (qwen35moe / HF qwen3_5_moe, qwen3_5_moe_text; Qwen3.6 checkpoints load as it):
/// the family's traits. Qwen3.5's layers with every MLP routed (softmax top-k, renormalised) plus
/// a sigmoid-gated shared expert; the forward is qwen35_model.hpp.
#include <families/qwen/qwen35_model.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/family.hpp>
#include <tf/kv/hybrid_pool.hpp>

#include <array>
#include <string_view>

namespace tf::families::qwen {

struct qwen35_moe {
  static constexpr std::string_view name = "qwen35_moe";
  static constexpr std::array<std::string_view, 3> arch_names{"qwen35moe", "qwen3_5_moe",
                                                              "qwen3_5_moe_text"};
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  using backend_needs =
      tf::backend::needs<tf::backend::recurrent_layers, tf::backend::routed_experts>;
  static constexpr bool per_request_admission = true;
  using hparams = qwen35_hparams;
  template <class B>
  using model = qwen35_model<B>;
};

}  // namespace tf::families::qwen
