#pragma once
/// The family registry: a Boost.Hana map from architecture name to family traits, and dispatch.
#include <tf/error.hpp>
#include <tf/family.hpp>

#include <boost/hana.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace tf::families {

namespace hana = boost::hana;

namespace detail {

// clang-format 14 splits an immediately invoked template lambda.
// clang-format off
template <class F, std::size_t J>
constexpr auto arch_key() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return hana::string_c<F::arch_names[J][I]...>;
  }(std::make_index_sequence<F::arch_names[J].size()>{});
}

template <class F>
constexpr auto arch_pairs() {
  return []<std::size_t... J>(std::index_sequence<J...>) {
    return hana::make_tuple(hana::make_pair(arch_key<F, J>(), hana::type_c<F>)...);
  }(std::make_index_sequence<F::arch_names.size()>{});
}
// clang-format on

template <class... F>
constexpr bool arch_names_unique() {
  std::vector<std::string_view> all;
  (all.insert(all.end(), F::arch_names.begin(), F::arch_names.end()), ...);
  for (std::size_t i = 0; i < all.size(); ++i)
    for (std::size_t j = i + 1; j < all.size(); ++j)
      if (all[i] == all[j]) return false;
  return true;
}

/// F's `drafter_arch`, or "" where it declares none.
template <class F>
constexpr std::string_view drafter_arch_of() {
  if constexpr (requires { F::drafter_arch; })
    return F::drafter_arch;
  else
    return {};
}

}  // namespace detail

/// A set of families; each answers the architecture names it lists in `arch_names`.
template <class... F>
struct registry {
  static_assert((family_check<F>::ok && ...));
  static_assert(detail::arch_names_unique<F...>(),
                "tf: two families in this registry answer the same architecture name");

  /// architecture name (hana::string) -> hana::type<Family>
  static constexpr auto map =
      hana::unpack(hana::flatten(hana::make_tuple(detail::arch_pairs<F>()...)), hana::make_map);

  static constexpr std::size_t size = sizeof...(F);

  /// The I-th family, in the order the registry lists them.
  template <std::size_t I>
  using family_at = std::tuple_element_t<I, std::tuple<F...>>;

  /// The same registry with more families (a downstream project adds its own this way).
  template <class... G>
  using with = registry<F..., G...>;

  static std::vector<std::string> architectures() {
    std::vector<std::string> names;
    hana::for_each(hana::keys(map),
                   [&](auto key) { names.emplace_back(hana::to<char const*>(key)); });
    return names;
  }

  /// Whether `arch` is the architecture of a drafter that one of the families runs over its own
  /// KV (a family's `drafter_arch`, as Gemma 4's assistant).
  static bool knows_drafter(std::string_view arch) {
    return !arch.empty() && ((detail::drafter_arch_of<F>() == arch) || ...);
  }
  static bool knows(std::string_view arch) {
    bool found = false;
    hana::for_each(hana::keys(map),
                   [&](auto key) { found = found || arch == hana::to<char const*>(key); });
    return found;
  }

  /// Calls `f(hana::type_c<Family>)` for the family answering `arch`; throws naming the known set.
  template <class Fn>
  static auto dispatch(std::string_view arch, Fn&& f) {
    using first = std::tuple_element_t<0, std::tuple<F...>>;
    using result = decltype(f(hana::type_c<first>));
    if constexpr (std::is_void_v<result>) {
      bool done = false;
      hana::for_each(map, [&](auto pair) {
        if (!done && arch == hana::to<char const*>(hana::first(pair))) {
          done = true;
          f(hana::second(pair));
        }
      });
      if (!done) throw unknown(arch);
    } else {
      std::optional<result> out;
      hana::for_each(map, [&](auto pair) {
        if (!out && arch == hana::to<char const*>(hana::first(pair)))
          out.emplace(f(hana::second(pair)));
      });
      if (!out) throw unknown(arch);
      return std::move(*out);
    }
  }

 private:
  static error unknown(std::string_view arch) {
    std::string known;
    for (auto const& n : architectures()) known += (known.empty() ? "" : ", ") + n;
    return error("tf: unknown architecture '{}'; known architectures: {}", arch, known);
  }
};

}  // namespace tf::families
