// A downstream family, registered by writing one traits struct and naming it in a registry.
#include <tf/engine.hpp>

#include <cstdio>
#include <string>

namespace my {
struct toy_hparams {
  int hidden_size = 8;
};
struct toy {
  static constexpr std::string_view name = "toy";
  static constexpr std::array<std::string_view, 2> arch_names{"toy", "toy_text"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = false;
  static constexpr bool has_forward = false;
  using hparams = toy_hparams;
};
}  // namespace my

using my_registry = tf::families::builtin::with<my::toy>;

int main() {
  std::string got = my_registry::dispatch("toy_text", [](auto t) {
    using F = typename decltype(t)::type;
    using E = tf::engine<F, tf::backend::cpu>;
    return std::string(E::family_name) + (E::binds_kv_pool ? "/kvPool" : "/ledgerPool");
  });
  std::string gemma =
      my_registry::dispatch("gemma3", [](auto t) { return std::string(decltype(t)::type::name); });
  bool refused = false;
  try {
    my_registry::dispatch("nope", [](auto) {});
  } catch (tf::error const&) {
    refused = true;
  }
  std::printf("consumer: %s %s refused=%d\n", got.c_str(), gemma.c_str(), refused);
  return got == "toy/kvPool" && gemma == "gemma3" && refused ? 0 : 1;
}
