// Must not compile: a family whose ledgerPool names a pool the ledger cannot count.
#include <tf/engine.hpp>

namespace broken {
struct not_a_pool {};
struct uncountable {
  static constexpr std::string_view name = "uncountable";
  static constexpr std::array<std::string_view, 1> arch_names{"uncountable"};
  using ledger_pool = tf::ledgerPool<not_a_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = int;
};
}  // namespace broken

int main() {
  return tf::families::builtin::with<broken::uncountable>::knows("uncountable") ? 0 : 1;
}
