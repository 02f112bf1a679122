// A rank that dies, exits early or stops answering makes every other rank throw tf::error naming
// it within 10 s: runs tests/dist/peer_failure_rank.cpp under mpirun --enable-recovery (Open
// MPI would otherwise end the survivors itself at once) and reads what the survivors report.
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <regex>
#include <string>

namespace {

struct run_result {
  std::string output;
  double seconds = 0;
};

run_result run(std::string const& mpi_args, std::string const& how, int victim, int timeout_ms) {
  std::string const command = std::string(TF_MPIEXEC) +
                              " --allow-run-as-root --oversubscribe --enable-recovery " + mpi_args +
                              " " + TF_PEER_FAILURE_RANK + " " + how + " " +
                              std::to_string(victim) + " " + std::to_string(timeout_ms) + " 2>&1";
  auto const start = std::chrono::steady_clock::now();
  run_result r;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) r.output += buffer.data();
  pclose(pipe);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// Each survivor's line: caught within `within_ms`, naming the victim.
void check_survivors(run_result const& r, int ranks, int victim, long within_ms) {
  INFO(r.output);
  for (int rank = 0; rank < ranks; ++rank) {
    if (rank == victim) continue;
    std::smatch m;
    std::regex const line("tf-peer-failure: rank " + std::to_string(rank) +
                          " caught after ([0-9]+) ms: ([^\n]*)");
    REQUIRE(std::regex_search(r.output, m, line));
    INFO("rank " << rank << ": " << m[2].str());
    CHECK(std::stol(m[1].str()) < within_ms);
    CHECK(m[2].str().find("rank " + std::to_string(victim) + " on ") != std::string::npos);
  }
  CHECK(r.output.find("finished with no error") == std::string::npos);
  CHECK(r.seconds < 60);
}

char const* const shared_memory = "--mca btl self,vader --mca oob_tcp_if_include lo";
char const* const tcp_loopback =
    "--mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo";

}  // namespace

TEST_CASE("dist/peer_failure: a killed rank 1 is named by rank 0 within 10 s (default timeout)",
          "[dist][mpi]") {
  check_survivors(run(std::string(shared_memory) + " -n 2", "kill", 1, 0), 2, 1, 10000);
}

TEST_CASE("dist/peer_failure: a killed rank 0 is named by rank 1", "[dist][mpi]") {
  check_survivors(run(std::string(shared_memory) + " -n 2", "kill", 0, 2000), 2, 0, 4000);
}

TEST_CASE("dist/peer_failure: a rank that exits early is named by the others, over TCP",
          "[dist][mpi]") {
  check_survivors(run(std::string(tcp_loopback) + " -n 3", "exit", 2, 2000), 3, 2, 4000);
}

TEST_CASE("dist/peer_failure: a rank that stops answering is named by the others", "[dist][mpi]") {
  run_result const r = run(std::string(shared_memory) + " -n 3", "stuck", 1, 2000);
  check_survivors(r, 3, 1, 4000);
  CHECK(r.output.find("stopped answering") != std::string::npos);
}
