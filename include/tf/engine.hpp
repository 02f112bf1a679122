#pragma once
/// The one header a downstream project includes: the engine over a family and a backend, and the
/// family registry.
#include <families/registry.hpp>
#include <tf/backend/backend.hpp>
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/registry.hpp>

#include <string_view>

namespace tf {

/// The engine for one family on one backend; `families::dispatch` picks `Family` from a file.
template <class Family, class Backend>
class engine {
  static_assert(family_check<Family>::ok);
  static_assert(backend::backend_type<Backend>,
                "tf: the backend must declare `static constexpr std::string_view name` and "
                "`static constexpr tf::backend::memory_kind memory`.");

 public:
  using family = Family;
  using backend_type = Backend;
  using pool = pool_of<Family>;
  using hparams = typename Family::hparams;

  static constexpr std::string_view family_name = Family::name;
  static constexpr bool per_request_admission = Family::per_request_admission;
  static constexpr bool binds_kv_pool = tf::binds_kv_pool<Family>;

  /// Throws, naming the family and backend, where no forward pass exists yet.
  static void require_forward() {
    if constexpr (!Family::has_forward)
      throw error("tf: the '{}' family is recognised but has no forward pass on the {} backend yet",
                  Family::name, Backend::name);
  }
};

}  // namespace tf
