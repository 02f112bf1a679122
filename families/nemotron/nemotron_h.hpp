#pragma once
/// Nemotron-H (nemotron_h; the MoE variant's GGUF arch is nemotron_h_moe): hybrid Mamba2 +
/// attention + relu² MLP / MoE; the family's traits. Its pool holds KV pages for the attention
/// layers and recurrent-state slots for the Mamba2 layers. The forward is nemotron_h_model.hpp.
#include <families/nemotron/nemotron_h_model.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/family.hpp>
#include <tf/kv/hybrid_pool.hpp>

#include <array>
#include <string_view>

namespace tf::families::nemotron {

struct nemotron_h {
  static constexpr std::string_view name = "nemotron_h";
  /// GGUF names (dense, MoE); HF folders answer by model_type, nemotron_h for both.
  static constexpr std::array<std::string_view, 2> arch_names{"nemotron_h", "nemotron_h_moe"};
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  using backend_needs =
      tf::backend::needs<tf::backend::recurrent_layers, tf::backend::routed_experts>;
  static constexpr bool per_request_admission = true;
  using hparams = nemotron_h_hparams;
  template <class B>
  using model = nemotron_h_model<B>;
};

}  // namespace tf::families::nemotron
