#pragma once
/// Gemma 3 (gemma3 / gemma3_text): the family's traits. Its forward is gemma3_model.hpp.
#include <families/gemma/gemma3_chat_template.hpp>
#include <families/gemma/gemma3_model.hpp>
#include <tf/family.hpp>

#include <array>
#include <string_view>

namespace tf::families::gemma {

struct gemma3 {
  static constexpr std::string_view name = "gemma3";
  static constexpr std::array<std::string_view, 2> arch_names{"gemma3", "gemma3_text"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = gemma3_hparams;
  template <class B>
  using model = gemma3_model<B>;
  static constexpr std::string_view builtin_chat_template = gemma3_chat_template;
};

}  // namespace tf::families::gemma
