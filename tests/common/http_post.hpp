#pragma once
// A POST whose failure throws instead of asserting: Catch2's assertions are not thread-safe and
// tests post from worker threads too; std::future::get() carries the exception to the test's
// thread, where Catch2 reports it.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace tf::test {

/// The JSON reply to a POST of `body` to `path`; throws unless the status is `want_status`.
inline nlohmann::json post_expecting(httplib::Client& c, std::string const& path,
                                     nlohmann::json const& body, int want_status) {
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r) throw std::runtime_error("POST " + path + ": no reply");
  if (r->status != want_status)
    throw std::runtime_error("POST " + path + ": status " + std::to_string(r->status) +
                             ", wanted " + std::to_string(want_status) + ": " + r->body);
  return nlohmann::json::parse(r->body);
}

}  // namespace tf::test
