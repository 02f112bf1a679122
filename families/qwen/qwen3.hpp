#pragma once
/// Qwen3 (qwen3): the family's traits. Its forward is qwen3_model.hpp.
#include <families/qwen/qwen3_model.hpp>
#include <tf/family.hpp>

#include <array>
#include <string_view>

namespace tf::families::qwen {

struct qwen3 {
  static constexpr std::string_view name = "qwen3";
  static constexpr std::array<std::string_view, 1> arch_names{"qwen3"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = qwen3_hparams;
  template <class B>
  using model = qwen3_model<B>;
};

}  // namespace tf::families::qwen
