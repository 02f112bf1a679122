// Fuzzes the /proc/meminfo reader. Contract: never throws; a reading has MemTotal and a free
// count, and a MemAvailable-less reading falls back to MemFree.
#include <tf/memory/meminfo.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto const m = tf::memory::parse_meminfo(tf_fuzz::as_text(data, size));
  if (m && !m->has_available)
    tf_fuzz::check(m->available_bytes == m->free_bytes, "MemFree stands in for MemAvailable");
  if (m) tf_fuzz::check(m->total_bytes % 1024 == 0, "counts are whole kB");
  return 0;
}
