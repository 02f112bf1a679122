#include <tf/memory/meminfo.hpp>

#include <catch2/catch.hpp>

#include <string>

#include "fixture_text.hpp"

using tf::memory::parse_meminfo;
using namespace tf_memory_test;

TEST_CASE("meminfo: MemTotal, MemAvailable and MemFree in bytes") {
  constexpr std::uint64_t gib = std::uint64_t{1} << 30;
  const auto m = parse_meminfo(meminfo_text(128 * gib, 96 * gib, 90 * gib));
  REQUIRE(m);
  CHECK(m->total_bytes == 128 * gib);
  CHECK(m->available_bytes == 96 * gib);
  CHECK(m->free_bytes == 90 * gib);
  CHECK(m->has_available);
}

TEST_CASE("meminfo: the real capture parses, available within total") {
  const auto text = fixture("host_meminfo.txt");
  const auto m = parse_meminfo(text);
  REQUIRE(m);
  CHECK(m->total_bytes > 0);
  CHECK(m->available_bytes <= m->total_bytes);
  CHECK(m->free_bytes <= m->total_bytes);
  // MemTotal is the first line: check the bytes against its kB figure read here.
  const auto first = text.substr(0, text.find('\n'));
  const auto kb = std::stoull(first.substr(first.find(':') + 1));
  CHECK(m->total_bytes == kb * 1024);
}

TEST_CASE("meminfo: kernels without MemAvailable fall back to MemFree") {
  const auto m = parse_meminfo("MemTotal: 2048 kB\nMemFree: 1024 kB\nBuffers: 1 kB\n");
  REQUIRE(m);
  CHECK_FALSE(m->has_available);
  CHECK(m->available_bytes == 1024 * 1024);
}

TEST_CASE("meminfo: bad text gives no reading") {
  CHECK_FALSE(parse_meminfo(""));
  CHECK_FALSE(parse_meminfo("MemFree: 1024 kB\nMemAvailable: 1024 kB\n"));  // no MemTotal
  CHECK_FALSE(parse_meminfo("MemTotal: 2048 kB\n"));                        // nothing free
  CHECK_FALSE(parse_meminfo("MemTotal: 20x8 kB\nMemAvailable: 1024 kB\n"));
  CHECK_FALSE(parse_meminfo("MemTotal: -2048 kB\nMemAvailable: 1024 kB\n"));
  CHECK_FALSE(parse_meminfo("MemTotal: 2048\nMemAvailable: 1024 kB\n"));  // no unit
  CHECK_FALSE(parse_meminfo("MemTotal: 18446744073709551615 kB\nMemAvailable: 1 kB\n"));
  CHECK_FALSE(parse_meminfo("MemTotal: 2048 kB\nMemTotal: 4096 kB\nMemAvailable: 1 kB\n"));
  CHECK(parse_meminfo("MemTotal: 2048 kB\nMemAvailable: 1024 kB\nJunk: x\n"));
}
