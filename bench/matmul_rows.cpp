// Kernel bench for the few-row quantized matmul (a speculative verify round runs one stream's
// k + 1 positions through every matrix): tf::kernels::cpu::matmul on the machine's path (or
// --isa avx2 / avx512) at 1..9 activation rows against b separate one-row calls, for the
// default model's shapes (the Q8_0 262,144 x 640 tied head, the Q5_0 layer matrices). Small
// matrices rotate through copies spread over 256 MiB, so their weights come from memory as in a
// decode step. Prints ms per call, weight GB/s (1e9 bytes/s) and ns per weight block per
// activation row.
//   g++ -O3 -std=c++20 -DNDEBUG -pthread -I include -I . bench/matmul_rows.cpp -o /tmp/mmr -lfmt
//   /tmp/mmr [--threads 1,2] [--rows 1,2,3,5,9] [--shapes head,ffn_up,ffn_down,q] [--secs 0.4]
//            [--isa avx2|avx512] [--arena MiB (256; one that fits the caches times the kernel
//            alone)]
#include <kernels/cpu/matmul.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using tf::kernels::cpu::isa;
using tf::kernels::cpu::matmul_params;
using tf::kernels::cpu::thread_pool;
using tf::model::tensor_type;

struct shape {
  const char* name;
  tensor_type type;
  std::int64_t n, k;
  bool rows8 = false;  // the layout the default model's Q8_0 head loads in
};

constexpr shape shapes[] = {
    {"head", tensor_type::q8_0, 262144, 640},
    {"head_rows8", tensor_type::q8_0, 262144, 640, true},
    {"ffn_up", tensor_type::q5_0, 2048, 640},
    {"ffn_down", tensor_type::q5_0, 640, 2048},
    {"q", tensor_type::q5_0, 1024, 640},
    {"q8_ffn_up", tensor_type::q8_0, 2048, 640},
    // qwen3-0.6b Q4_K_M: Q4_K ffn_up / gate, the Q6_K head and ffn_down.
    {"q4k_ffn_up", tensor_type::q4_k, 3072, 1024},
    {"q6k_head", tensor_type::q6_k, 151936, 1024},
    {"q6k_ffn_down", tensor_type::q6_k, 1024, 3072},
    {"q4k_big", tensor_type::q4_k, 32768, 2048},
    // The Gemma 4 E2B head: Q6_K 262,144 x 1536.
    {"q6k_e2b_head", tensor_type::q6_k, 262144, 1536},
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p) ++p;
  }
  return v;
}

// Random quants with sane fp16 scales in every block (the first two bytes of each block; Q4_K's
// d and dmin, Q6_K's d in its last two).
void fill(std::uint8_t* w, std::int64_t bytes, tensor_type t, std::int64_t block_bytes) {
  std::mt19937_64 rng(7);
  for (std::int64_t i = 0; i + 8 <= bytes; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(w + i, &v, 8);
  }
  const std::int64_t at = t == tensor_type::q6_k ? block_bytes - 2 : 0;
  const int count = t == tensor_type::q4_k ? 2 : 1;
  for (std::int64_t i = 0; i + block_bytes <= bytes; i += block_bytes)
    for (int j = 0; j < count; ++j) {
      const std::uint16_t d = 0x2400;  // about 0.0156
      std::memcpy(w + i + at + 2 * j, &d, 2);
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2}, rows = {1, 2, 3, 5, 9};
  std::string which = "head,ffn_up,ffn_down";
  double secs = 0.4;
  isa path = tf::kernels::cpu::default_isa();
  std::int64_t arena = 256ll << 20;
  bool amx = tf::kernels::cpu::amx_tiles();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads")
      threads = parse_list(argv[i + 1]);
    else if (a == "--rows")
      rows = parse_list(argv[i + 1]);
    else if (a == "--shapes")
      which = argv[i + 1];
    else if (a == "--secs")
      secs = std::atof(argv[i + 1]);
    else if (a == "--arena")
      arena = std::atoll(argv[i + 1]) << 20;
    else if (a == "--amx")
      amx = std::atoi(argv[i + 1]) != 0;
    else if (a == "--isa")
      path = std::string(argv[i + 1]) == "avx512" ? isa::avx512 : isa::avx2;
  }
  std::printf("path: %s%s\n", std::string(tf::kernels::cpu::isa_name(path)).c_str(),
              amx && tf::kernels::cpu::amx_tiles() && path == isa::avx512 ? " + AMX tiles" : "");
  auto* mem =
      static_cast<std::uint8_t*>(mmap(nullptr, static_cast<std::size_t>(arena),
                                      PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (mem == MAP_FAILED) return 1;
  madvise(mem, static_cast<std::size_t>(arena), MADV_HUGEPAGE);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  constexpr int most_rows = 512;
  std::vector<float> x(most_rows * 4096), y;
  for (auto& v : x) v = nd(rng);
  std::printf("%-9s %4s %3s %9s %9s %8s %11s %9s\n", "shape", "thr", "b", "ms/call", "ms/1row*b",
              "GB/s", "ns/blk/row", "vs 1row");
  for (const auto& s : shapes) {
    if (("," + which + ",").find("," + std::string(s.name) + ",") == std::string::npos) continue;
    const auto tr = tf::model::traits_of(s.type);
    const std::int64_t wrb = static_cast<std::int64_t>(tf::model::row_bytes(s.type, s.k));
    const std::int64_t bytes = wrb * s.n;
    if (bytes > arena) {
      std::printf("%-9s does not fit the arena\n", s.name);
      continue;
    }
    const std::int64_t copies = arena / bytes;
    fill(mem, std::min(arena, bytes * copies), s.type, static_cast<std::int64_t>(tr.block_bytes));
    if (s.rows8)
      for (std::int64_t c = 0; c < copies; ++c)
        tf::kernels::cpu::regroup_rows8(reinterpret_cast<std::byte*>(mem + c * bytes), s.n, s.k);
    const double blocks = static_cast<double>(s.n) * static_cast<double>(s.k / tr.block_elems);
    for (int t : threads) {
      thread_pool pool(t);
      auto time_calls = [&](std::int64_t b, int calls_per) {
        std::int64_t c = 0;
        std::vector<double> samples;
        const auto start = std::chrono::steady_clock::now();
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
                   secs ||
               samples.size() < 5) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int j = 0; j < calls_per; ++j) {
            matmul_params p;
            p.w_type = s.type;
            p.w = mem + (c % copies) * bytes;
            p.x = x.data() + (calls_per > 1 ? j * s.k : 0);
            p.y = y.data();
            p.n = s.n;
            p.k = s.k;
            p.b = b;
            if (s.rows8) p.layout = tf::kernels::cpu::weight_layout::rows8;
            tf::kernels::cpu::matmul(p, pool, path, amx);
            ++c;
          }
          samples.push_back(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(samples.begin(), samples.end());
        return samples[samples.size() / 2];
      };
      for (int b : rows) {
        if (b < 1 || b > most_rows) continue;
        y.resize(static_cast<std::size_t>(b * s.n));
        const double many = time_calls(b, 1);
        // b one-row calls, each on other weights (b decode steps' worth of weight reads).
        const double ones = time_calls(1, b);
        std::printf("%-9s %4d %3d %9.3f %9.3f %8.2f %11.3f %9.2f\n", s.name, t, b, many * 1e3,
                    ones * 1e3, static_cast<double>(bytes) / many / 1e9, many * 1e9 / (blocks * b),
                    ones / many);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
