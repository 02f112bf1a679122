#pragma once
// A CPU test that cannot run fails: the project's scripts install what it needs (the default
// model, the built binaries, the openai client), so a skip would hide a broken install step.
// TF_ALLOW_SKIP=1 (a partial checkout) makes it a warning instead.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

namespace tf::test {

/// Fails the test (or, with TF_ALLOW_SKIP set, warns) saying why it cannot run; returns false.
inline bool cannot_run(std::string const& why) {
  if (std::getenv("TF_ALLOW_SKIP")) {
    WARN("SKIP (TF_ALLOW_SKIP): " << why);
  } else {
    FAIL_CHECK(why << " (bash scripts/install-deps.sh installs it; TF_ALLOW_SKIP=1 skips)");
  }
  return false;
}

}  // namespace tf::test
