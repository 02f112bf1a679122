// Must not compile: a family that binds both kvPool and ledgerPool.
#include <tf/engine.hpp>

namespace broken {
struct both_pools {
  static constexpr std::string_view name = "both_pools";
  static constexpr std::array<std::string_view, 1> arch_names{"both_pools"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = int;
};
}  // namespace broken

int main() {
  return tf::families::builtin::with<broken::both_pools>::knows("both_pools") ? 0 : 1;
}
