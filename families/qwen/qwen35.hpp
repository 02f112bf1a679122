#pragma once
/// Qwen3.5 dense (qwen35 / HF qwen3_5, qwen3_5_text): the family's traits. Gated DeltaNet layers
/// keep a recurrent state per stream, so the pool holds state slots beside the attention layers'
/// KV pages. Its forward is qwen35_model.hpp (shared with qwen35moe).
#include <families/qwen/qwen35_model.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/family.hpp>
#include <tf/kv/hybrid_pool.hpp>

#include <array>
#include <string_view>

namespace tf::families::qwen {

struct qwen35 {
  static constexpr std::string_view name = "qwen35";
  static constexpr std::array<std::string_view, 3> arch_names{"qwen35", "qwen3_5", "qwen3_5_text"};
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  using backend_needs =
      tf::backend::needs<tf::backend::recurrent_layers, tf::backend::routed_experts>;
  static constexpr bool per_request_admission = true;
  using hparams = qwen35_hparams;
  template <class B>
  using model = qwen35_model<B>;
};

}  // namespace tf::families::qwen
