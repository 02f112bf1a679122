#pragma once
// Helpers shared by the fuzz targets. A target calls the code under test on the input and lets
// only the error the code documents escape into its catch (tf::error, or api_error for requests):
// any other exception, a signal, an ASan/UBSan report or a leak is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tf_fuzz {

/// The text of fixtures/<rel>; throws when it cannot be read (a broken checkout, not a finding).
inline std::string fixture(std::string const& rel) {
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/" + rel, std::ios::binary);
  if (!in) throw std::runtime_error("fuzz: cannot read fixtures/" + rel);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Fails the run (libFuzzer reports the input) when `ok` is false.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace tf_fuzz
