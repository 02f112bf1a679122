// The all-reduce's time per call at tensor parallelism's shapes: hidden 640 (Gemma 3 270M, the
// default model), 1024, 4096 and 5120 (GLM-4.5) for 1, 8 and 64 rows, through
// tf::dist::mpi_communicator. Run it under mpirun (bench/RESULTS.md has the command):
//   mpirun -n 2 build-dist/bench_allreduce [calls per shape, default 2000]
// Rank 0 prints one line per shape: the all-reduce's median over 5 batches of each batch's mean
// per call, its fastest batch, and the all-gather alone (the all-reduce less its rank-order sum).
#include <tf/dist/mpi_communicator.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  tf::dist::mpi_runtime mpi(&argc, &argv);
  tf::dist::mpi_communicator comm;
  int const calls = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (comm.rank() == 0)
    std::printf(
        "ranks %d, %d calls per batch, 5 batches per shape\n%8s %6s %10s %12s %12s %12s %10s\n",
        comm.size(), calls, "hidden", "rows", "bytes", "us/call", "min us", "gather us", "GB/s");
  for (int hidden : {640, 1024, 4096, 5120}) {
    for (int rows : {1, 8, 64}) {
      std::vector<float> x(static_cast<std::size_t>(hidden) * rows);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1e-3f * static_cast<float>(i % 977);
      std::vector<float> gathered(x.size() * static_cast<std::size_t>(comm.size()));
      for (int i = 0; i < calls / 10 + 1; ++i) comm.all_reduce_sum(x);  // warm up
      auto time_batches = [&](auto&& call) {
        std::vector<double> per_call;
        for (int batch = 0; batch < 5; ++batch) {
          comm.barrier();
          auto const start = std::chrono::steady_clock::now();
          for (int i = 0; i < calls; ++i) call();
          double const us =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count();
          per_call.push_back(us / calls);
        }
        std::sort(per_call.begin(), per_call.end());
        return per_call;
      };
      std::vector<double> const reduce = time_batches([&] {
        comm.all_reduce_sum(x);
        // Keep the values bounded: the sums grow every call.
        if (x[0] > 1e30f) std::fill(x.begin(), x.end(), 1.0f);
      });
      std::vector<double> const gather = time_batches(
          [&] { comm.all_gather(std::span<float const>(x), std::span<float>(gathered)); });
      double const median = reduce[reduce.size() / 2];
      std::size_t const bytes = x.size() * sizeof(float);
      if (comm.rank() == 0)
        std::printf("%8d %6d %10zu %12.2f %12.2f %12.2f %10.2f\n", hidden, rows, bytes, median,
                    reduce.front(), gather[gather.size() / 2],
                    static_cast<double>(bytes) / (median * 1e3));
    }
  }
  return 0;
}
