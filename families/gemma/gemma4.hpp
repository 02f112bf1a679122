#pragma once
/// Gemma 4 (gemma4 / gemma4_text): the family's traits. Its forward is gemma4_model.hpp, its
/// assistant drafter gemma4_assistant.hpp.
#include <families/gemma/gemma4_assistant.hpp>
#include <families/gemma/gemma4_model.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/family.hpp>

#include <array>
#include <string_view>

namespace tf::families::gemma {

struct gemma4 {
  static constexpr std::string_view name = "gemma4";
  static constexpr std::array<std::string_view, 2> arch_names{"gemma4", "gemma4_text"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  using backend_needs = tf::backend::needs<tf::backend::routed_experts>;
  static constexpr bool per_request_admission = true;
  using hparams = gemma4_hparams;
  template <class B>
  using model = gemma4_model<B>;
  /// A drafter that reads this family's KV: its file's architecture, and its forward.
  static constexpr std::string_view drafter_arch = gemma4_assistant_arch;
  template <class B>
  using target_kv_drafter = gemma4_assistant<B>;
};

}  // namespace tf::families::gemma
