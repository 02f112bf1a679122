// STREAM-like read bandwidth: sums a 1 GiB buffer with 1 and 2 threads (or those given), prints
// GB/s (1e9 bytes/s), best of several passes, on 4 KiB pages and on transparent huge pages, with
// and without software prefetch; the first figure is the best of them. Used to compute the decode
// bandwidth limit: tokens/s limit = bandwidth / bytes of weights read per token.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

// Eight independent sums so the loop is bound by loads, not by add latency; with `prefetch`, each
// 64-byte line is asked for 16 KiB ahead.
double sum_range(const double* p, std::size_t n, bool prefetch) {
  double s[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (prefetch && i + 2048 < n) __builtin_prefetch(p + i + 2048, 0, 2);
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  }
  for (; i < n; ++i) s[0] += p[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

double run(const double* buf, std::size_t n, int threads, bool prefetch, double& checksum) {
  std::vector<double> part(static_cast<std::size_t>(threads));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const std::size_t b = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
      const std::size_t e = n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
      part[static_cast<std::size_t>(t)] = sum_range(buf + b, e - b, prefetch);
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
  // 2 MiB aligned anonymous memory; the huge-page buffer is advised for transparent huge pages.
  auto alloc = [&](bool huge) {
    const std::size_t align = std::size_t{2} << 20;
    void* raw =
        mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      std::perror("stream_bandwidth: mmap");
      std::exit(1);
    }
    auto* p = reinterpret_cast<double*>((reinterpret_cast<std::uintptr_t>(raw) + align - 1) /
                                        align * align);
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<double>(i & 1023);
    return std::pair{raw, p};
  };
  const double expect = static_cast<double>(n / 1024) * (1023.0 * 1024.0 / 2.0);
  // best[threads index][huge][prefetch]
  std::vector<std::array<std::array<double, 2>, 2>> best(thread_counts.size());
  bool bad = false;
  for (int huge = 0; huge < 2; ++huge) {
    auto [raw, buf] = alloc(huge != 0);
    for (std::size_t ti = 0; ti < thread_counts.size(); ++ti)
      for (int pf = 0; pf < 2; ++pf) {
        double b = 0, checksum = 0;
        for (int pass = 0; pass < 4; ++pass)
          b = std::max(b, run(buf, n, thread_counts[ti], pf != 0, checksum));
        bad = bad || checksum != expect;
        best[ti][static_cast<std::size_t>(huge)][static_cast<std::size_t>(pf)] = b;
      }
    munmap(raw, bytes + (std::size_t{2} << 20));
  }
  for (std::size_t ti = 0; ti < thread_counts.size(); ++ti) {
    const auto& b = best[ti];
    const double top = std::max({b[0][0], b[0][1], b[1][0], b[1][1]});
    std::printf(
        "stream read: %d thread%s, 1 GiB buffer: %.2f GB/s (4 KiB pages %.2f, with prefetch "
        "%.2f; huge pages %.2f, with prefetch %.2f)%s\n",
        thread_counts[ti], thread_counts[ti] == 1 ? "" : "s", top, b[0][0], b[0][1], b[1][0],
        b[1][1], bad ? " (CHECKSUM MISMATCH)" : "");
  }
  return 0;
}
