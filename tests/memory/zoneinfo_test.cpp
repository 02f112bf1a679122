#include <tf/memory/meminfo.hpp>
#include <tf/memory/pool.hpp>
#include <tf/memory/zoneinfo.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fixture_text.hpp"

using tf::memory::parked_bytes;
using tf::memory::parse_zoneinfo;
using tf::memory::zoneinfo_format;
using namespace tf_memory_test;

namespace {

constexpr std::uint64_t page = 4096;
constexpr std::uint64_t mib = std::uint64_t{1} << 20;

// Pages beyond the resting level, list by list, as the test states them.
std::uint64_t beyond(const std::vector<list>& lists) {
  std::uint64_t s = 0;
  for (const auto& l : lists) s += l.count > l.high_min ? l.count - l.high_min : 0;
  return s;
}

// The most a text can justify: every count: line's value, saturating, whether or not it is a
// list's.
std::uint64_t count_bound(const std::string& text) {
  std::uint64_t sum = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    auto line = tf::memory::detail::trim(std::string_view(text).substr(pos, nl - pos));
    pos = nl + 1;
    if (!line.starts_with("count:")) continue;
    auto v = tf::memory::detail::trim(line.substr(6));
    std::uint64_t n = 0;
    for (char c : v) {
      if (c < '0' || c > '9') break;
      n = n > (UINT64_MAX - 9) / 10 ? UINT64_MAX : n * 10 + static_cast<std::uint64_t>(c - '0');
    }
    sum = sum > UINT64_MAX - n ? UINT64_MAX : sum + n;
  }
  return sum;
}

std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  return a != 0 && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

}  // namespace

TEST_CASE("6.7+ format: every CPU, zone and node; lists under their resting level count 0") {
  const auto text = fixture("zoneinfo_6_7_two_nodes.txt");
  // The lists as the fixture holds them (node 0 DMA, DMA32, Normal; node 1 Normal).
  const std::vector<list> dma{{0, 11}, {0, 11}, {0, 11}, {0, 11}};
  const std::vector<list> dma32{{3000, 2497}, {100, 2497}, {2497, 2497}, {5000, 2497}};
  const std::vector<list> n0{{60000, 8049}, {8048, 8049}, {12049, 8049}, {0, 8049}};
  const std::vector<list> n1{{30000, 8049}, {40000, 8049}, {7000, 8049}, {8050, 8049}};
  const auto pages = beyond(dma) + beyond(dma32) + beyond(n0) + beyond(n1);
  const auto r = parse_zoneinfo(text, page);
  CHECK(r.format == zoneinfo_format::high_min);
  CHECK(r.lists == 16);
  CHECK(r.parked_pages == pages);
  CHECK(r.parked_bytes == pages * page);
  CHECK(parked_bytes(text, 16384) == pages * 16384);

  SECTION("the same zones built here agree with the fixture") {
    const auto built = zone(0, "DMA", dma) + zone(0, "DMA32", dma32) + zone(0, "Normal", n0) +
                       zone(1, "Normal", n1);
    CHECK(parked_bytes(built, page) == r.parked_bytes);
  }
  SECTION("a zone whose lists are all at or under rest counts nothing") {
    CHECK(parked_bytes(zone(0, "Normal", {{8049, 8049}, {1, 8049}}), page) == 0);
    CHECK(parse_zoneinfo(zone(0, "Normal", {{8049, 8049}}), page).format ==
          zoneinfo_format::high_min);
  }
}

TEST_CASE("before 6.7 (no high_min:) a fixed 512 MiB resting level is subtracted") {
  const auto text = fixture("zoneinfo_6_1_pre_high_min.txt");
  const std::uint64_t listed = (0 + 0 + 300 + 200 + 60000 + 100000) * page;
  const auto r = parse_zoneinfo(text, page);
  CHECK(r.format == zoneinfo_format::pre_high_min);
  CHECK(r.lists == 6);
  CHECK(r.count_pages * page == listed);
  CHECK(r.parked_bytes == listed - 512 * mib);

  // Under 512 MiB on the lists: nothing counted, the same as reading MemAvailable alone.
  const auto small = zone(0, "Normal", {{1000, 378}, {2000, 378}}, false);
  CHECK(parse_zoneinfo(small, page).format == zoneinfo_format::pre_high_min);
  CHECK(parked_bytes(small, page) == 0);
  const std::uint64_t at_rest_pages = 512 * mib / page;
  CHECK(parked_bytes(zone(0, "Normal", {{at_rest_pages, 378}}, false), page) == 0);
  CHECK(parked_bytes(zone(0, "Normal", {{at_rest_pages + 3, 378}}, false), page) == 3 * page);
}

TEST_CASE("only lines under pagesets count") {
  const std::vector<list> lists{{10000, 2000}, {3000, 2000}};
  const auto base = zone(0, "Normal", lists);
  const auto expected = beyond(lists) * page;
  REQUIRE(parked_bytes(base, page) == expected);

  SECTION("stray count: lines before any zone") {
    CHECK(parked_bytes("count: 99999\n    cpu: 0\n  count: 5000\n" + base, page) == expected);
  }
  SECTION("count: among a zone's fields before pagesets") {
    auto t = base;
    t.insert(t.find("  pagesets"), "              count:    777777\n");
    CHECK(parked_bytes(t, page) == expected);
  }
  SECTION("a list ends at its zone's next field") {
    auto t = base + "              count:    555555\n              high_min: 0\n";
    CHECK(parked_bytes(t, page) == expected);
    auto u = base;
    u.insert(u.find("  start_pfn"), "              count:    444444\n");
    CHECK(parked_bytes(u, page) == expected);
  }
  SECTION("count: after a list's vm stats threshold, with no cpu: line") {
    auto t = base;
    t.insert(t.find("  node_unreclaimable"), "              count:    333333\n");
    CHECK(parked_bytes(t, page) == expected);
  }
  SECTION("another zone's fields and a zone without pagesets") {
    const auto t =
        base + "Node 0, zone  Movable\n  pages free     0\n              count:    4242\n";
    CHECK(parked_bytes(t, page) == expected);
  }
  SECTION("pagesets before any Node line") {
    CHECK(parked_bytes("  pagesets\n    cpu: 0\n              count: 90000\n", page) == 0);
  }
}

TEST_CASE("bad input counts nothing") {
  const auto good = zone(0, "Normal", {{10000, 2000}});
  REQUIRE(parked_bytes(good, page) > 0);
  auto replaced = [&](const std::string& from, const std::string& to) {
    auto t = good;
    const auto at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    return t;
  };
  SECTION("no lists") {
    const auto t = "Node 0, zone  Movable\n  pages free     0\n  pagesets\n  start_pfn: 0\n";
    CHECK(parse_zoneinfo(t, page).format == zoneinfo_format::none);
    CHECK(parked_bytes(t, page) == 0);
  }
  SECTION("empty") {
    CHECK(parse_zoneinfo("", page).format == zoneinfo_format::none);
    CHECK(parked_bytes("", page) == 0);
  }
  SECTION("garbled") {
    for (const auto& t :
         {replaced("10000", "10x00"), replaced("10000", ""),
          replaced("high_min: 2000", "high_min: two"), replaced("cpu: 0", "cpu: zero"),
          replaced("              count:    10000\n", ""),
          replaced("  node_unreclaimable",
                   "    cpu: 1\n              count:    1\n              count:    9\n  "
                   "node_unreclaimable"),
          std::string("this is not zoneinfo\n\x01\x02")}) {
      CHECK(parse_zoneinfo(t, page).format == zoneinfo_format::bad);
      CHECK(parked_bytes(t, page) == 0);
    }
  }
  SECTION("negative") {
    CHECK(parked_bytes(replaced("10000", "-10000"), page) == 0);
    CHECK(parked_bytes(replaced("high_min: 2000", "high_min: -2000"), page) == 0);
  }
  SECTION("binary") {
    CHECK(parked_bytes(replaced("Normal", std::string("Nor\0al", 6)), page) == 0);
    CHECK(parked_bytes(replaced("batch",
                                "b\xff"
                                "tch"),
                       page) == 0);
    CHECK(parked_bytes(good + std::string("\0\0\0\0", 4), page) == 0);
  }
  SECTION("overflowing") {
    CHECK(parked_bytes(replaced("10000", "18446744073709551616"), page) == 0);  // 2^64
    CHECK(parked_bytes(replaced("10000", "4611686018427387904"), page) == 0);   // x page
    const auto twice = zone(0, "Normal", {{UINT64_MAX, 0}, {UINT64_MAX, 0}});   // the sum
    CHECK(parse_zoneinfo(twice, 1).format == zoneinfo_format::bad);
    CHECK(parked_bytes(zone(0, "Normal", {{UINT64_MAX / 2, 0}}, false), page) == 0);
  }
  SECTION("formats mixed in one text") {
    CHECK(parked_bytes(good + zone(1, "Normal", {{900000, 378}}, false), page) == 0);
  }
  SECTION("page size 0 is a caller's error") {
    CHECK_THROWS_AS(parked_bytes(good, 0), tf::error);
  }
}

TEST_CASE("the real capture and this host's /proc/zoneinfo parse to less than MemTotal") {
  const auto m = tf::memory::parse_meminfo(fixture("host_meminfo.txt"));
  REQUIRE(m);
  const auto r = parse_zoneinfo(fixture("host_zoneinfo.txt"), page);
  CHECK(r.format != zoneinfo_format::bad);
  CHECK(r.lists > 0);
  CHECK(r.parked_bytes < m->total_bytes);
#if defined(__linux__)
  std::string meminfo, zoneinfo;
  try {
    meminfo = read_text("/proc/meminfo");
    zoneinfo = read_text("/proc/zoneinfo");
  } catch (const std::exception& e) {
    WARN("skipped: " << e.what());
    return;
  }
  const auto host_m = tf::memory::parse_meminfo(meminfo);
  REQUIRE(host_m);
  const auto host = parse_zoneinfo(zoneinfo, tf::memory::system_page_size());
  INFO("this host: " << host.lists << " lists, " << host.parked_bytes << " bytes parked");
  CHECK(host.format != zoneinfo_format::bad);
  CHECK(host.parked_bytes < host_m->total_bytes);
#else
  WARN("skipped: /proc/zoneinfo is Linux-only");
#endif
}

TEST_CASE(
    "fuzz: random and mutated texts never crash and never count more than their count: lines") {
  std::mt19937_64 rng(0x7a6f6e65);
  auto below = [&](std::uint64_t n) {
    return std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng);
  };
  auto number = [&]() -> std::string {
    switch (below(8)) {
      case 0:
        return "0";
      case 1:
        return std::to_string(below(100));
      case 2:
        return std::to_string(below(100000));
      case 3:
        return std::to_string(UINT64_MAX - below(3));
      case 4:
        return "18446744073709551616";
      case 5:
        return "-" + std::to_string(below(1000));
      case 6:
        return std::to_string(below(1ull << 52));
      default:
        return std::to_string(below(10000)) + "k";
    }
  };
  auto line = [&]() -> std::string {
    switch (below(14)) {
      case 0:
        return "Node " + std::to_string(below(4)) + ", zone   Normal";
      case 1:
        return "  pagesets";
      case 2:
      case 3:
        return "    cpu: " + number();
      case 4:
      case 5:
        return "              count:    " + number();
      case 6:
        return "              high:     " + number();
      case 7:
        return "              batch:    63";
      case 8:
      case 9:
        return "              high_min: " + number();
      case 10:
        return "              high_max: " + number();
      case 11:
        return "  vm stats threshold: " + number();
      case 12:
        return "  node_unreclaimable:  0";
      default:
        return "count: " + number();
    }
  };
  const std::vector<std::string> bases{fixture("zoneinfo_6_7_two_nodes.txt"),
                                       fixture("zoneinfo_6_1_pre_high_min.txt"),
                                       fixture("host_zoneinfo.txt")};
  const std::uint64_t pages[] = {1, 4096, 16384, 65536};
  constexpr int cases = 100000;
  int counted = 0;
  for (int i = 0; i < cases; ++i) {
    std::string text;
    if (i % 2 == 0) {
      const auto n = below(40);
      for (std::uint64_t k = 0; k < n; ++k) text += line() + "\n";
    } else {
      const auto& b = bases[below(bases.size())];
      const auto from = below(b.size());
      text = b.substr(from, 1 + below(2000));
      for (auto m = below(6); m > 0; --m) {
        const auto at = below(text.size() + 1);
        switch (below(5)) {
          case 0:
            if (at < text.size()) text[at] = static_cast<char>(below(256));
            break;
          case 1:
            text.insert(at, 1, "0123456789:- \n"[below(15)]);
            break;
          case 2:
            text.erase(at, below(40));
            break;
          case 3:
            text.insert(at, line() + "\n");
            break;
          default:
            text.insert(at, text.substr(at, below(200)));
            break;
        }
      }
    }
    const auto p = pages[below(4)];
    const auto r = parse_zoneinfo(text, p);
    const auto bound = sat_mul(count_bound(text), p);
    if (r.parked_bytes > bound || r.parked_bytes > sat_mul(r.count_pages, p) ||
        ((r.format == zoneinfo_format::bad || r.format == zoneinfo_format::none) &&
         r.parked_bytes != 0)) {
      FAIL("case " << i << " counted " << r.parked_bytes << " of at most " << bound << ":\n"
                   << text);
    }
    counted += r.parked_bytes > 0;
  }
  CHECK(counted > 0);  // the mutated fixtures still reach the counting path
}

TEST_CASE("linear time: 50 MB of zoneinfo parses fast") {
  const auto one = fixture("zoneinfo_6_7_two_nodes.txt");
  const auto single = parked_bytes(one, page);
  std::string big;
  std::uint64_t copies = 0;
  while (big.size() < 50'000'000) {
    big += one;
    ++copies;
  }
  const std::string stray_text(50'000'000, 'c');
  std::string counts;
  while (counts.size() < 50'000'000) counts += "count: 12345\n";
  // Only the parsing is timed; a quadratic pass over 150 MB would take hours, not a minute.
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = parked_bytes(big, page);
  const auto stray = parked_bytes(stray_text, page);
  const auto lines = parked_bytes(counts, page);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r == copies * single);
  CHECK(stray == 0);
  CHECK(lines == 0);
  INFO("150 MB in " << s << " s");
  CHECK(s < 60.0);
}
