#pragma once
/// The memory pool reading that sizes a start: host and unified memory read /proc/meminfo and then
/// /proc/zoneinfo; a discrete card reads its own free/total and never reads zoneinfo.
#include <tf/error.hpp>
#include <tf/memory/meminfo.hpp>
#include <tf/memory/zoneinfo.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace tf::memory {

inline constexpr std::uint64_t gib = std::uint64_t{1} << 30;

/// Bytes as GiB, for log lines and messages.
inline double to_gib(std::uint64_t bytes) {
  return static_cast<double>(bytes) / static_cast<double>(gib);
}

/// Where a start's memory lives: it picks the reading and the reserve rule.
enum class memory_kind {
  host,      ///< the CPU backend: host RAM
  unified,   ///< a GPU sharing host RAM (GB10, Jetson): read like host memory
  discrete,  ///< a GPU with its own memory: the device's free/total reading
};

/// Reads a procfs file by path ("/proc/meminfo", "/proc/zoneinfo"); nullopt when it cannot.
using proc_reader = std::function<std::optional<std::string>(std::string_view path)>;

/// A discrete device's own memory reading, in bytes.
struct device_memory {
  std::uint64_t free_bytes = 0;
  std::uint64_t total_bytes = 0;
};

/// Reads a discrete device's free and total memory (cudaMemGetInfo on CUDA).
using device_reader = std::function<device_memory()>;

/// The proc_reader for this machine: reads the file whole, nullopt if it cannot be opened.
inline proc_reader system_proc_reader() {
  return [](std::string_view path) -> std::optional<std::string> {
    std::ifstream in{std::string(path), std::ios::binary};
    if (!in) return std::nullopt;
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) return std::nullopt;
    return text;
  };
}

/// This machine's page size in bytes (4096 where it cannot be asked).
inline std::uint64_t system_page_size() {
#if defined(_SC_PAGESIZE)
  const long p = ::sysconf(_SC_PAGESIZE);
  if (p > 0) return static_cast<std::uint64_t>(p);
#endif
  return 4096;
}

/// One reading of a pool: what sizes a start, and the parked share it counted.
struct pool_reading {
  memory_kind kind = memory_kind::host;
  std::uint64_t total_bytes = 0;      ///< MemTotal, or the device's total
  std::uint64_t available_bytes = 0;  ///< MemAvailable, or the device's free bytes
  std::uint64_t parked_bytes = 0;     ///< the parked share actually added (0 on discrete)
  std::uint64_t pool_bytes = 0;       ///< available + parked, at most total
};

/// Adds the parked bytes to MemAvailable, capped at MemTotal; records only the share added.
inline pool_reading counting(const meminfo& m, std::uint64_t parked,
                             memory_kind kind = memory_kind::host) {
  pool_reading r;
  r.kind = kind;
  r.total_bytes = m.total_bytes;
  r.available_bytes = m.available_bytes;
  const auto base = m.available_bytes < m.total_bytes ? m.available_bytes : m.total_bytes;
  const auto room = m.total_bytes - base;
  r.parked_bytes = parked < room ? parked : room;
  r.pool_bytes = base + r.parked_bytes;
  return r;
}

/// Reads host or unified memory: /proc/meminfo, then /proc/zoneinfo right after it.
inline pool_reading read_proc_pool(const proc_reader& read, std::uint64_t page_size,
                                   memory_kind kind = memory_kind::host) {
  if (kind == memory_kind::discrete)
    throw tf::error("read_proc_pool: a discrete device is read with read_device_pool, not /proc");
  const auto text = read("/proc/meminfo");
  if (!text) throw tf::error("memory budget: cannot read /proc/meminfo (needed to size the start)");
  const auto m = parse_meminfo(*text);
  if (!m)
    throw tf::error(
        "memory budget: /proc/meminfo has no readable MemTotal and MemAvailable/MemFree "
        "({} bytes of text)",
        text->size());
  // The per-CPU lists drain into MemAvailable, so a page moving between the reads is missed, never
  // counted twice.
  const auto zones = read("/proc/zoneinfo");
  const auto parked = zones ? parked_bytes(*zones, page_size) : 0;
  return counting(*m, parked, kind);
}

/// Reads a discrete device: its free bytes are the pool; zoneinfo is never read.
inline pool_reading read_device_pool(const device_reader& read) {
  const auto d = read();
  if (d.free_bytes > d.total_bytes)
    throw tf::error("memory budget: the device reports {} bytes free of {} total", d.free_bytes,
                    d.total_bytes);
  pool_reading r;
  r.kind = memory_kind::discrete;
  r.total_bytes = d.total_bytes;
  r.available_bytes = d.free_bytes;
  r.pool_bytes = d.free_bytes;
  return r;
}

/// Reads the pool of the given kind with the matching reader.
inline pool_reading read_pool(memory_kind kind, const proc_reader& proc,
                              const device_reader& device, std::uint64_t page_size) {
  if (kind == memory_kind::discrete) {
    if (!device) throw tf::error("memory budget: a discrete device needs a device_reader");
    return read_device_pool(device);
  }
  if (!proc) throw tf::error("memory budget: host and unified memory need a proc_reader");
  return read_proc_pool(proc, page_size, kind);
}

/// What a rank reports to a start over ranks: its room and the bytes of weights it holds there
/// (its share of a split model), which differ by rank where a rank holds more (rank 0's drafts).
struct rank_report {
  pool_reading room;
  std::uint64_t model_bytes = 0;
};

/// From this many parked bytes the budget logs what it counted.
inline constexpr std::uint64_t parked_line_threshold = gib / 4;

/// The parked-pages line ("the memory budget counts ..."), from 0.25 GiB; `what` names the
/// reading ("the memory budget" after the load, "the room this rank reports" in the room probe).
inline std::optional<std::string> parked_line(std::uint64_t parked,
                                              std::string_view what = "the memory budget") {
  if (parked < parked_line_threshold) return std::nullopt;
  return fmt::format(
      "{} counts {:.2f} GiB free on the per-CPU page lists beyond their resting level "
      "(MemAvailable does not)",
      what, to_gib(parked));
}

}  // namespace tf::memory
