#pragma once
// Runs a shell command for a test of a built binary: its exit status and what it printed.
#include <array>
#include <cstdio>
#include <memory>
#include <string>

namespace tf::test {

struct run_result {
  int status = -1;  // pclose's status: 0 when the command exited 0
  std::string out;  // stdout and stderr
};

/// Runs `cmd` with its stderr joined to its stdout.
inline run_result run_command(std::string const& cmd) {
  run_result r;
  auto const full = cmd + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(full.c_str(), "r"), pclose);
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p.get()))
    r.out.append(buf.data(), n);
  r.status = pclose(p.release());
  return r;
}

}  // namespace tf::test
