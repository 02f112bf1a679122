// Tests apps/tf-memory: it prints a captured machine's reading and budget, and refuses with the
// shortfall.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include "../common/cannot_run.hpp"

namespace {

struct run_result {
  std::string out;
  int status = -1;
};

run_result run(std::string const& args) {
  std::string cmd = std::string(TF_BINARY_DIR) + "/apps/tf-memory " + args + " 2>&1";
  run_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  int raw = ::pclose(p);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

std::string captured() {
  std::string f = TF_FIXTURES_DIR;
  return " --meminfo " + f + "/memory/host_meminfo.txt --zoneinfo " + f +
         "/memory/host_zoneinfo.txt";
}

}  // namespace

TEST_CASE("tf-memory prints the reading and the start-up line for a captured machine") {
  if (!std::filesystem::exists(std::string(TF_BINARY_DIR) + "/apps/tf-memory")) {
    tf::test::cannot_run("tf-memory is not built");
    return;
  }
  auto r =
      run("--model-gib 0.25 --context 8192 --parallel 4 --kv-bytes-per-token 18432" + captured());
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("MemTotal") != std::string::npos);
  CHECK(r.out.find("MemAvailable") != std::string::npos);
  CHECK(r.out.find("4 streams at once") != std::string::npos);
  CHECK(r.out.find("at a 8192-token window") != std::string::npos);
  CHECK(r.out.find("prompt_cache_budget_bytes") != std::string::npos);
}

TEST_CASE("tf-memory refuses a fixed --parallel that does not fit, naming the shortfall") {
  if (!std::filesystem::exists(std::string(TF_BINARY_DIR) + "/apps/tf-memory")) {
    tf::test::cannot_run("tf-memory is not built");
    return;
  }
  auto r = run("--model-gib 0.25 --context 8192 --parallel 4000 --kv-bytes-per-token 18432" +
               captured());
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(r.out.find("--parallel 4000 does not fit") != std::string::npos);
  CHECK(r.out.find("short by") != std::string::npos);
}
