#pragma once
/// An int from a config.json value, checked: config.json is untrusted input, and a float or a huge
/// number converted to int is undefined behaviour.
#include <tf/error.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <string_view>

namespace tf::model {

/// `v` as an int: an integer in int's range, or a float with an integral value in that range
/// (transformers writes some sizes as 1024.0); anything else is a tf::error naming `key`.
inline int config_int(nlohmann::json const& v, std::string_view key = "a config value") {
  constexpr double lo = std::numeric_limits<int>::min(), hi = std::numeric_limits<int>::max();
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                               : (v.get<std::int64_t>() >= static_cast<std::int64_t>(lo) &&
                                  v.get<std::int64_t>() <= static_cast<std::int64_t>(hi)))
      return static_cast<int>(v.get<std::int64_t>());
  } else if (v.is_number_float()) {
    double const d = v.get<double>();
    if (std::isfinite(d) && d >= lo && d <= hi && d == std::floor(d)) return static_cast<int>(d);
  }
  throw error("tf: config.json: {} is {}, not an int", key, v.dump());
}

/// A number read as a double (optional keys with defaults) as an int, checked the same way.
inline int config_int(double d, std::string_view key = "a config value") {
  constexpr double lo = std::numeric_limits<int>::min(), hi = std::numeric_limits<int>::max();
  if (std::isfinite(d) && d >= lo && d <= hi && d == std::floor(d)) return static_cast<int>(d);
  throw error("tf: config.json: {} is {}, not an int", key, d);
}

}  // namespace tf::model
