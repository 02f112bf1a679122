// Fuzzes the /proc/zoneinfo reader with 4 KiB and 64 KiB pages. Contract: never throws for a
// non-zero page size; a bad or empty reading counts no parked bytes.
#include <tf/memory/zoneinfo.hpp>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using tf::memory::zoneinfo_format;
  for (std::uint64_t page : {std::uint64_t{4096}, std::uint64_t{65536}}) {
    auto const r = tf::memory::parse_zoneinfo(tf_fuzz::as_text(data, size), page);
    if (r.format == zoneinfo_format::bad || r.format == zoneinfo_format::none)
      tf_fuzz::check(r.parked_bytes == 0 && r.parked_pages == 0, "nothing parked on a bad read");
    if (r.format == zoneinfo_format::high_min)
      tf_fuzz::check(r.parked_bytes == r.parked_pages * page, "parked bytes are whole pages");
    if (r.format != zoneinfo_format::bad)
      tf_fuzz::check(r.parked_pages <= r.count_pages, "parked within the listed pages");
  }
  return 0;
}
