// The all-reduce's time per call at tensor parallelism's shapes: hidden 640 (Gemma 3 270M, the
// default model), 1024, 4096 and 5120 (GLM-4.5) for 1, 8 and 64 rows, through
// tf::dist::mpi_communicator. Run it under mpirun (bench/RESULTS.md has the command):
//   mpirun -n 2 build-dist/bench_allreduce [calls per shape, default 2000]
// Rank 0 prints one line per shape: the median over 5 batches of each batch's mean per call.
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
    std::printf("ranks %d, %d calls per batch, 5 batches per shape\n%8s %6s %10s %12s %12s %10s\n",
                comm.size(), calls, "hidden", "rows", "bytes", "us/call", "min us", "GB/s");
  for (int hidden : {640, 1024, 4096, 5120}) {
    for (int rows : {1, 8, 64}) {
      std::vector<float> x(static_cast<std::size_t>(hidden) * rows);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1e-3f * static_cast<float>(i % 977);
      for (int i = 0; i < calls / 10 + 1; ++i) comm.all_reduce_sum(x);  // warm up
      std::vector<double> per_call;
      for (int batch = 0; batch < 5; ++batch) {
        comm.barrier();
        auto const start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
          comm.all_reduce_sum(x);
          // Keep the values bounded: the sums double every call.
          if (x[0] > 1e30f) std::fill(x.begin(), x.end(), 1.0f);
        }
        double const us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count();
        per_call.push_back(us / calls);
      }
      std::sort(per_call.begin(), per_call.end());
      double const median = per_call[per_call.size() / 2];
      std::size_t const bytes = x.size() * sizeof(float);
      if (comm.rank() == 0)
        std::printf("%8d %6d %10zu %12.2f %12.2f %10.2f\n", hidden, rows, bytes, median,
                    per_call.front(), static_cast<double>(bytes) / (median * 1e3));
    }
  }
  return 0;
}
