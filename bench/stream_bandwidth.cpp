// STREAM-like read bandwidth: sums a 1 GiB buffer with 1 and 2 threads (or those given), prints
// GB/s (1e9 bytes/s), best of several passes. Used to compute the decode bandwidth limit:
// tokens/s limit = bandwidth / bytes of weights read per token.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

// Eight independent sums so the loop is bound by loads, not by add latency.
double sum_range(const double* p, std::size_t n) {
  double s[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  for (; i < n; ++i) s[0] += p[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

double run(const double* buf, std::size_t n, int threads, double& checksum) {
  std::vector<double> part(static_cast<std::size_t>(threads));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const std::size_t b = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
      const std::size_t e = n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
      part[static_cast<std::size_t>(t)] = sum_range(buf + b, e - b);
    });
  for (auto& th : pool) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  checksum = 0;
  for (double v : part) checksum += v;
  return static_cast<double>(n * sizeof(double)) / secs / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = std::size_t{1} << 30;
  const std::size_t n = bytes / sizeof(double);
  std::vector<int> thread_counts;
  for (int i = 1; i < argc; ++i) thread_counts.push_back(std::max(1, std::atoi(argv[i])));
  if (thread_counts.empty()) thread_counts = {1, 2};
  std::vector<double> buf(n);
  for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<double>(i & 1023);
  const double expect = static_cast<double>(n / 1024) * (1023.0 * 1024.0 / 2.0);
  for (int threads : thread_counts) {
    double best = 0, checksum = 0;
    for (int pass = 0; pass < 6; ++pass) best = std::max(best, run(buf.data(), n, threads, checksum));
    std::printf("stream read: %d thread%s, 1 GiB buffer: %.2f GB/s%s\n", threads,
                threads == 1 ? "" : "s", best, checksum == expect ? "" : " (CHECKSUM MISMATCH)");
  }
  return 0;
}
