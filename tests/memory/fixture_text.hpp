#pragma once
// Helpers the memory tests share: fixture files and hand-built zoneinfo/meminfo text.
#include <cstdint>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tf_memory_test {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::string fixture(const std::string& name) {
  return read_text(std::string(TF_FIXTURES_DIR) + "/memory/" + name);
}

/// One per-CPU list: its count: and its high_min: (the resting level).
struct list {
  std::uint64_t count;
  std::uint64_t high_min;
};

/// A zone as the kernel prints it, with its pagesets; new_format prints high_min: (6.7+).
inline std::string zone(int node, const std::string& name, const std::vector<list>& lists,
                        bool new_format = true) {
  std::string s = "Node " + std::to_string(node) + ", zone " + name + "\n";
  s += "  pages free     1000\n        min      19\n        high     27\n";
  s += "      nr_free_pages 1000\n";
  s += "  pagesets\n";
  int cpu = 0;
  for (const auto& l : lists) {
    s += "    cpu: " + std::to_string(cpu++) + "\n";
    if (new_format) {
      s += "              count:    " + std::to_string(l.count) + "\n";
      s += "              high:     " + std::to_string(l.high_min) + "\n";
      s += "              batch:    63\n";
      s += "              high_min: " + std::to_string(l.high_min) + "\n";
      s += "              high_max: " + std::to_string(l.high_min * 19) + "\n";
    } else {
      s += "              count: " + std::to_string(l.count) + "\n";
      s += "              high:  " + std::to_string(l.high_min) + "\n";
      s += "              batch: 63\n";
    }
    s += "  vm stats threshold: 32\n";
  }
  s += "  node_unreclaimable:  0\n  start_pfn:           4096\n";
  return s;
}

/// /proc/meminfo text with the given counts in bytes (printed in kB, as the kernel does).
inline std::string meminfo_text(std::uint64_t total, std::uint64_t available, std::uint64_t free) {
  auto kb = [](std::uint64_t b) { return std::to_string(b / 1024) + " kB\n"; };
  return "MemTotal:       " + kb(total) + "MemFree:        " + kb(free) +
         "MemAvailable:   " + kb(available) + "Buffers:           10676 kB\n" +
         "Cached:          1588628 kB\nSwapTotal:             0 kB\n";
}

}  // namespace tf_memory_test
