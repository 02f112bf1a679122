// One rank of tests/dist/peer_failure_test.cpp's runs: the victim rank dies, exits or stops
// answering before an all-reduce; every other rank reports what its all-reduce threw, and when.
//   peer_failure_rank <kill|exit|stuck> <victim rank> <timeout ms, 0: the default>
#include <tf/dist/mpi_communicator.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: peer_failure_rank <kill|exit|stuck> <victim> <timeout ms>\n");
    return 2;
  }
  std::string const how = argv[1];
  int const victim = std::atoi(argv[2]);
  long const timeout_ms = std::atol(argv[3]);
  tf::dist::mpi_runtime mpi(&argc, &argv);
  tf::dist::mpi_options options;
  if (timeout_ms > 0) options.timeout = std::chrono::milliseconds(timeout_ms);
  tf::dist::mpi_communicator comm(options);
  std::vector<float> x(640, static_cast<float>(comm.rank()));
  comm.all_reduce_sum(x);  // every rank is up and talking
  if (comm.rank() == victim) {
    if (how == "kill") std::raise(SIGKILL);
    if (how == "exit") std::_Exit(0);  // leaves without MPI_Finalize, as a crash would
    // stuck: alive, never joins; leaves after the others gave up
    std::this_thread::sleep_for(comm.timeout() + std::chrono::seconds(3));
    std::_Exit(0);
  }
  auto const start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 3; ++i) comm.all_reduce_sum(x);
  } catch (tf::error const& e) {
    auto const ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    std::printf("tf-peer-failure: rank %d caught after %lld ms: %s\n", comm.rank(),
                static_cast<long long>(ms), e.what());
    std::fflush(stdout);
    return 3;
  }
  std::printf("tf-peer-failure: rank %d finished with no error\n", comm.rank());
  return 0;
}
