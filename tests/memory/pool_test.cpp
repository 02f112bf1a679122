#include <tf/memory/pool.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fixture_text.hpp"

using namespace tf::memory;
using namespace tf_memory_test;

namespace {

constexpr std::uint64_t page = 4096;

// zoneinfo text holding `bytes` beyond high_min, split over two CPUs and two nodes.
std::string zones_beyond(std::uint64_t bytes) {
  const auto pages = bytes / page;
  const auto a = pages / 3, b = pages - a;
  return zone(0, "Normal", {{a + 8049, 8049}, {100, 8049}}) + zone(1, "Normal", {{b + 8049, 8049}});
}

// A reader answering /proc/meminfo and /proc/zoneinfo from text, recording what it was asked.
struct fake_proc {
  std::optional<std::string> meminfo, zoneinfo;
  std::vector<std::string> asked;
  proc_reader reader() {
    return [this](std::string_view path) -> std::optional<std::string> {
      asked.emplace_back(path);
      if (path == "/proc/meminfo") return meminfo;
      if (path == "/proc/zoneinfo") return zoneinfo;
      return std::nullopt;
    };
  }
};

}  // namespace

TEST_CASE("a unified/host pool counts the parked pages, at most MemTotal") {
  fake_proc proc;
  proc.meminfo = meminfo_text(128 * gib, 96 * gib, 90 * gib);

  SECTION("6 GiB beyond high_min gives 102 GiB and names the 6 GiB") {
    proc.zoneinfo = zones_beyond(6 * gib);
    const auto r = read_proc_pool(proc.reader(), page, memory_kind::unified);
    CHECK(r.pool_bytes == 102 * gib);
    CHECK(r.parked_bytes == 6 * gib);
    CHECK(r.available_bytes == 96 * gib);
    CHECK(r.kind == memory_kind::unified);
    // zoneinfo is read right after meminfo.
    CHECK(proc.asked == std::vector<std::string>{"/proc/meminfo", "/proc/zoneinfo"});
  }
  SECTION("40 GiB parked stops at 128") {
    proc.zoneinfo = zones_beyond(40 * gib);
    const auto r = read_proc_pool(proc.reader(), page);
    CHECK(r.pool_bytes == 128 * gib);
    CHECK(r.parked_bytes == 32 * gib);
  }
  SECTION("no zoneinfo, an empty or a garbled one gives 96 and names 0") {
    for (const std::optional<std::string>& z :
         {std::optional<std::string>{}, std::optional<std::string>{""},
          std::optional<std::string>{
              "Node 0, zone Normal\n  pagesets\n    cpu: 0\n   count: ?!\n"}}) {
      proc.zoneinfo = z;
      const auto r = read_proc_pool(proc.reader(), page);
      CHECK(r.pool_bytes == 96 * gib);
      CHECK(r.parked_bytes == 0);
    }
  }
}

TEST_CASE("the pool names the parked share it counted: 6 GiB, 4 GiB when capped, 0 without") {
  const meminfo m96{128 * gib, 96 * gib, 90 * gib, true};
  CHECK(counting(m96, 6 * gib).parked_bytes == 6 * gib);
  const meminfo m124{128 * gib, 124 * gib, 120 * gib, true};
  const auto capped = counting(m124, 6 * gib);
  CHECK(capped.parked_bytes == 4 * gib);
  CHECK(capped.pool_bytes == 128 * gib);
  CHECK(counting(m96, 0).parked_bytes == 0);
  CHECK(counting(m96, 0).pool_bytes == 96 * gib);
  // MemAvailable above MemTotal (never seen, but never trusted either) still stops at MemTotal.
  const meminfo odd{8 * gib, 9 * gib, 1 * gib, true};
  CHECK(counting(odd, 1 * gib).pool_bytes == 8 * gib);
}

TEST_CASE("zoneinfo is read only where meminfo is read") {
  fake_proc proc;
  proc.zoneinfo = zones_beyond(6 * gib);
  CHECK_THROWS_AS(read_proc_pool(proc.reader(), page), tf::error);
  proc.meminfo = "garbage";
  CHECK_THROWS_AS(read_proc_pool(proc.reader(), page), tf::error);
  for (const auto& p : proc.asked) CHECK(p == "/proc/meminfo");
}

TEST_CASE("a discrete card uses its own reading and never reads zoneinfo") {
  const proc_reader must_not_read = [](std::string_view path) -> std::optional<std::string> {
    FAIL("the discrete path read " << std::string(path));
    return std::nullopt;
  };
  const device_reader device = [] { return device_memory{70 * gib, 80 * gib}; };
  const auto r = read_pool(memory_kind::discrete, must_not_read, device, page);
  CHECK(r.kind == memory_kind::discrete);
  CHECK(r.pool_bytes == 70 * gib);
  CHECK(r.total_bytes == 80 * gib);
  CHECK(r.parked_bytes == 0);
  CHECK_THROWS_AS(read_device_pool([] { return device_memory{9, 8}; }), tf::error);
  CHECK_THROWS_AS(read_pool(memory_kind::discrete, must_not_read, nullptr, page), tf::error);
}

TEST_CASE("the parked line starts at 0.25 GiB") {
  const auto at = [](double g) { return static_cast<std::uint64_t>(g * static_cast<double>(gib)); };
  CHECK_FALSE(parked_line(at(0.24)));
  CHECK_FALSE(parked_line(0));
  const auto l = parked_line(at(0.25));
  REQUIRE(l);
  CHECK(*l ==
        "the memory budget counts 0.25 GiB free on the per-CPU page lists beyond their "
        "resting level (MemAvailable does not)");
  CHECK(*parked_line(at(1.06)) ==
        "the memory budget counts 1.06 GiB free on the per-CPU page lists beyond their resting "
        "level (MemAvailable does not)");
  CHECK(parked_line(at(0.78), "the room this rank reports")
            ->starts_with("the room this rank reports counts 0.78 GiB"));
}

TEST_CASE("this machine's reading") {
#if defined(__linux__)
  const auto r = read_proc_pool(system_proc_reader(), system_page_size());
  CHECK(r.total_bytes > 0);
  CHECK(r.pool_bytes <= r.total_bytes);
  CHECK(r.pool_bytes >= std::min(r.available_bytes, r.total_bytes));
  CHECK(r.pool_bytes - std::min(r.available_bytes, r.total_bytes) == r.parked_bytes);
#else
  WARN("skipped: /proc is Linux-only");
#endif
}

TEST_CASE(
    "the real captured pair: the pool is MemAvailable plus what the lists hold, under MemTotal") {
  fake_proc proc;
  proc.meminfo = fixture("host_meminfo.txt");
  proc.zoneinfo = fixture("host_zoneinfo.txt");
  const auto m = parse_meminfo(*proc.meminfo);
  REQUIRE(m);
  const auto parked = parked_bytes(*proc.zoneinfo, page);
  const auto r = read_proc_pool(proc.reader(), page);
  CHECK(r.available_bytes == m->available_bytes);
  CHECK(r.parked_bytes == std::min(parked, m->total_bytes - m->available_bytes));
  CHECK(r.pool_bytes == m->available_bytes + r.parked_bytes);
  CHECK(r.pool_bytes <= m->total_bytes);
}
