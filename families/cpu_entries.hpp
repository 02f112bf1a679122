#pragma once
/// The families tf-generate and serve can run on the CPU: one entry each (cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/gemma/gemma3_entry.hpp>
#include <families/glm/glm4_entry.hpp>
#include <families/glm/glm4_moe_entry.hpp>
#include <families/qwen/qwen3_entry.hpp>
#include <families/qwen/qwen3_moe_entry.hpp>
#include <tf/error.hpp>

#include <boost/hana.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace tf::families {

inline constexpr auto cpu_entries =
    boost::hana::tuple_t<gemma::gemma3_cpu, glm::glm4_cpu, glm::glm4_moe_cpu, qwen::qwen3_cpu,
                         qwen::qwen3_moe_cpu>;

/// Calls `f(hana::type_c<Entry>)` for the entry that accepts `arch`; throws tf::error naming
/// the architectures there are when none does.
template <class Fn>
auto dispatch_cpu(std::string_view arch, Fn&& f) {
  using first = typename decltype(+boost::hana::front(cpu_entries))::type;
  using result = decltype(f(boost::hana::type_c<first>));
  if constexpr (std::is_void_v<result>) {
    bool found = false;
    boost::hana::for_each(cpu_entries, [&](auto t) {
      using entry = typename decltype(t)::type;
      static_assert(cpu_entry<entry>, "a CPU entry must satisfy tf::families::cpu_entry");
      if (!found && entry::accepts(arch)) {
        found = true;
        f(t);
      }
    });
    if (found) return;
  } else {
    std::optional<result> out;
    boost::hana::for_each(cpu_entries, [&](auto t) {
      using entry = typename decltype(t)::type;
      static_assert(cpu_entry<entry>, "a CPU entry must satisfy tf::families::cpu_entry");
      if (!out && entry::accepts(arch)) out.emplace(f(t));
    });
    if (out) return std::move(*out);
  }
  std::string names;
  boost::hana::for_each(cpu_entries, [&](auto t) {
    if (!names.empty()) names += ", ";
    names += decltype(t)::type::name;
  });
  throw error("tf: no CPU forward for architecture '{}' (there are: {})", arch, names);
}

}  // namespace tf::families
