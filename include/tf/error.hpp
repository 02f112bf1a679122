#pragma once
/// tf::error: what failed, with the values and where; host code throws it, the server maps it to
/// HTTP.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tf {

class error : public std::runtime_error {
 public:
  explicit error(std::string what) : std::runtime_error(std::move(what)) {}

  template <class... Args>
  explicit error(fmt::format_string<Args...> f, Args&&... args)
      : std::runtime_error(fmt::format(f, std::forward<Args>(args)...)) {}
};

}  // namespace tf
