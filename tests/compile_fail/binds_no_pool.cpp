// Must not compile: a family that binds no KV pool to the ledger.
#include <tf/engine.hpp>

namespace broken {
struct no_pool {
  static constexpr std::string_view name = "no_pool";
  static constexpr std::array<std::string_view, 1> arch_names{"no_pool"};
  static constexpr bool per_request_admission = true;
  using hparams = int;
};
}  // namespace broken

int main() {
  return tf::families::builtin::with<broken::no_pool>::knows("no_pool") ? 0 : 1;
}
