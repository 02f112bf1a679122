#pragma once
/// What the families on the engine's paged KV pool with a CPU forward declare alike.
#include <tf/family.hpp>

namespace tf::families {

/// Base of such a family's traits: the KV pool bound to the ledger as
/// `tf::kvPool<tf::kv::paged_pool>`, per-request admission, a CPU forward, and `HParams`. The
/// family adds `name` and `arch_names`; tf::family_check checks the whole at compile time.
template <class HParams>
struct paged_cpu_family {
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = true;
  static constexpr bool has_forward = true;
  using hparams = HParams;
};

}  // namespace tf::families
