#include <tf/memory/budget.hpp>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "fixture_text.hpp"

using namespace tf::memory;
using Catch::Matchers::Contains;

namespace {

constexpr std::uint64_t mib = std::uint64_t{1} << 20;

pool_reading host_reading(std::uint64_t total, std::uint64_t available, std::uint64_t parked) {
  return counting(meminfo{total, available, available, true}, parked, memory_kind::host);
}

// 32 layers x 8 KV heads x 128 head dim x 2 (K and V) x 2 bytes (f16).
constexpr std::uint64_t kv_per_token = 32 * 8 * 128 * 2 * 2;

budget_options options(std::uint64_t model, std::uint64_t window,
                       std::optional<std::uint32_t> parallel) {
  budget_options o;
  o.model_bytes = model;
  o.window_tokens = window;
  o.parallel = parallel;
  o.kv_bytes_per_token = kv_per_token;
  o.page_tokens = 16;
  return o;
}

env_reader env_of(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string gib2(std::uint64_t b) {
  return fmt::format("{:.2f}", to_gib(b));
}

}  // namespace

TEST_CASE(
    "default reserve: 1/10 of RAM (at least 4 GiB) on host and unified, 1/32 (at least 1 GiB) "
    "discrete") {
  CHECK(default_reserve_bytes(memory_kind::host, 128 * gib) == 128 * gib / 10);
  CHECK(default_reserve_bytes(memory_kind::unified, 121 * gib) == 121 * gib / 10);
  CHECK(default_reserve_bytes(memory_kind::host, 16 * gib) == 4 * gib);
  CHECK(default_reserve_bytes(memory_kind::discrete, 141 * gib) == 141 * gib / 32);
  CHECK(default_reserve_bytes(memory_kind::discrete, 16 * gib) == gib);
}

TEST_CASE("--parallel auto serves as many streams as fit, sized from one reading") {
  const auto r = host_reading(128 * gib, 96 * gib, 6 * gib);
  const auto o = options(10 * gib, 8192, std::nullopt);
  const auto b = compute_budget(r, o);
  const auto reserve = 128 * gib / 10;
  const auto pages_per_stream = (8192 + 15) / 16;
  CHECK(b.pool_bytes == 102 * gib);
  CHECK(b.parked_bytes == 6 * gib);
  CHECK(b.reserve_bytes == reserve);
  CHECK(b.left_bytes == 102 * gib - reserve - 10 * gib);
  CHECK(b.page_bytes == kv_per_token * 16);
  CHECK(b.bytes_per_stream == pages_per_stream * kv_per_token * 16);
  CHECK(b.streams == std::min<std::uint64_t>(64, b.left_bytes / b.bytes_per_stream));
  CHECK(b.kv_pages == std::uint64_t{b.streams} * pages_per_stream);
  CHECK(b.prompt_cache_budget_bytes == b.left_bytes - b.streams * b.bytes_per_stream);

  SECTION("at most the upper bound; without it, the streams that fit") {
    auto few = o;
    few.max_auto_streams = 1000;
    const auto all = compute_budget(r, few);
    CHECK(all.streams == b.left_bytes / b.bytes_per_stream);
    CHECK(all.streams > 64);
    CHECK((all.streams + 1) * all.bytes_per_stream > all.left_bytes);
  }
  SECTION("a long window leaves fewer streams") {
    const auto w = compute_budget(r, options(10 * gib, 131072, std::nullopt));
    CHECK(w.streams == w.left_bytes / w.bytes_per_stream);
    CHECK(w.streams < b.streams);
    CHECK(w.window_tokens == 131072);
  }
}

TEST_CASE("a fixed --parallel N takes N streams; the kept-prompt budget gets what they leave") {
  const auto r = host_reading(128 * gib, 40 * gib, 0);
  auto o = options(5 * gib, 16384, 8);
  const auto b = compute_budget(r, o);
  CHECK(b.streams == 8);
  const auto left = 40 * gib - 128 * gib / 10 - 5 * gib;
  CHECK(b.left_bytes == left);
  CHECK(b.prompt_cache_budget_bytes == left - 8 * b.bytes_per_stream);
  o.prompt_cache_bytes = 2 * gib;
  CHECK(compute_budget(r, o).prompt_cache_budget_bytes == 2 * gib);
  o.prompt_cache_bytes = 500 * gib;
  CHECK(compute_budget(r, o).prompt_cache_budget_bytes == left - 8 * b.bytes_per_stream);
}

TEST_CASE("refusals say what is short, by how much") {
  const auto r = host_reading(128 * gib, 40 * gib, 0);
  const auto reserve = 128 * gib / 10;
  SECTION("a fixed --parallel too big") {
    const auto o = options(5 * gib, 32768, 64);
    const auto left = 40 * gib - reserve - 5 * gib;
    const auto per = (32768 / 16) * kv_per_token * 16;
    REQUIRE(left / per > 1);
    const auto short_by = 64 * per - left;
    CHECK_THROWS_WITH(
        compute_budget(r, o),
        Contains("--parallel 64 does not fit") &&
            Contains(fmt::format("short by {} GiB ({} bytes)", gib2(short_by), short_by)) &&
            Contains(fmt::format("{} streams fit", left / per)));
  }
  SECTION("a model too big") {
    const auto o = options(30 * gib, 4096, std::nullopt);
    const auto short_by = 30 * gib - (40 * gib - reserve);
    CHECK_THROWS_WITH(compute_budget(r, o), Contains("the model does not fit") &&
                                                Contains(fmt::format("short by {} GiB ({} bytes)",
                                                                     gib2(short_by), short_by)));
  }
  SECTION("a pool under the reserve") {
    const auto o = options(1 * gib, 4096, std::nullopt);
    CHECK_THROWS_WITH(compute_budget(host_reading(128 * gib, 10 * gib, 0), o),
                      Contains(fmt::format("({} bytes)", 1 * gib)));
  }
  SECTION("--parallel auto when not one stream fits") {
    const auto o = options(20 * gib, 1u << 20, std::nullopt);
    const auto left = 40 * gib - reserve - 20 * gib;
    const auto per = (std::uint64_t{1} << 20) * kv_per_token;
    CHECK_THROWS_WITH(compute_budget(r, o), Contains("--parallel auto fits no stream") &&
                                                Contains(fmt::format("({} bytes)", per - left)));
  }
  SECTION("bad options") {
    CHECK_THROWS_AS(compute_budget(r, options(gib, 0, std::nullopt)), tf::error);
    CHECK_THROWS_AS(compute_budget(r, options(gib, 4096, 0)), tf::error);
    auto o = options(gib, 4096, std::nullopt);
    o.page_tokens = 0;
    CHECK_THROWS_AS(compute_budget(r, o), tf::error);
    o = options(gib, UINT64_MAX / 2, 1);
    CHECK_THROWS_AS(compute_budget(r, o), tf::error);
  }
}

TEST_CASE("sliding-window ring: a fixed part per stream, outside the KV pages") {
  const auto r = host_reading(64 * gib, 50 * gib, 0);
  auto o = options(2 * gib, 4096, 4);
  o.sliding_bytes_per_stream = 300 * mib;
  const auto b = compute_budget(r, o);
  CHECK(b.bytes_per_stream == (4096 / 16) * kv_per_token * 16 + 300 * mib);
  CHECK(b.kv_pages == 4 * (4096 / 16));
  o.kv_bytes_per_token = 0;  // only sliding layers: a ring per stream, no pages
  const auto ring = compute_budget(r, o);
  CHECK(ring.kv_pages == 0);
  CHECK(ring.bytes_per_stream == 300 * mib);
}

TEST_CASE("recurrent state: counted per stream, it lowers --parallel auto; the line names it") {
  const auto r = host_reading(64 * gib, 40 * gib, 0);
  auto o = options(2 * gib, 4096, std::nullopt);
  o.max_auto_streams = 1000;
  const auto plain = compute_budget(r, o);
  CHECK(plain.state_bytes_per_stream == 0);
  CHECK_THAT(plain.lines.back(), !Contains("recurrent state"));

  o.state_bytes_per_stream = 2 * 50 * mib;  // a 50 MiB slot and the lane's snapshot of it
  const auto b = compute_budget(r, o);
  CHECK(b.state_bytes_per_stream == 100 * mib);
  CHECK(b.bytes_per_stream == plain.bytes_per_stream + 100 * mib);
  CHECK(b.streams == b.left_bytes / b.bytes_per_stream);
  CHECK(b.streams < plain.streams);
  CHECK(b.kv_pages == std::uint64_t{b.streams} * (4096 / 16));
  CHECK(b.prompt_cache_budget_bytes == b.left_bytes - b.streams * b.bytes_per_stream);
  REQUIRE(b.lines.size() == 1);
  CHECK(b.lines[0] ==
        fmt::format("CPU (host memory): model 2.00 GiB; {} streams at once, {:.2f} GiB each at a "
                    "4096-token window, of {:.1f} GiB left after a {:.1f} GiB reserve; KV pages {} "
                    "(page 16 tokens); recurrent state 104857600 bytes per stream; "
                    "prompt_cache_budget_bytes {}",
                    b.streams, to_gib(b.bytes_per_stream), to_gib(b.left_bytes),
                    to_gib(b.reserve_bytes), b.kv_pages, b.prompt_cache_budget_bytes));

  // A fixed --parallel that fits without the state does not with it.
  o.parallel = plain.streams;
  CHECK_THROWS_WITH(compute_budget(r, o),
                    Contains(fmt::format("--parallel {} does not fit", plain.streams)) &&
                        Contains(fmt::format("{} streams fit", b.streams)));
  // Only recurrent state (no KV pages): the state alone sizes the streams.
  o.parallel = std::nullopt;
  o.kv_bytes_per_token = 0;
  const auto only = compute_budget(r, o);
  CHECK(only.kv_pages == 0);
  CHECK(only.bytes_per_stream == 100 * mib);
  CHECK(only.streams == std::min<std::uint64_t>(1000, only.left_bytes / (100 * mib)));
}

TEST_CASE("reserve and cap: flag, else env, else the default") {
  const auto r = host_reading(128 * gib, 96 * gib, 0);
  auto o = options(10 * gib, 8192, 4);
  budget_options from_env = o;
  apply_env(from_env, env_of({{"TF_MEMORY_RESERVE_GIB", "20"}, {"TF_MEMORY_CAP_GIB", "30.5"}}));
  CHECK(from_env.reserve_bytes == 20 * gib);
  CHECK(from_env.cap_bytes == 30 * gib + gib / 2);
  const auto capped = compute_budget(r, from_env);
  CHECK(capped.reserve_bytes == 20 * gib);
  CHECK(capped.left_bytes == 30 * gib + gib / 2 - 10 * gib);
  CHECK_THAT(capped.lines.back(), Contains("and a 30.5 GiB cap"));

  budget_options flag = o;
  flag.reserve_bytes = 2 * gib;
  apply_env(flag, env_of({{"TF_MEMORY_RESERVE_GIB", "20"}}));
  CHECK(flag.reserve_bytes == 2 * gib);
  CHECK(compute_budget(r, flag).left_bytes == 96 * gib - 2 * gib - 10 * gib);

  budget_options none = o;
  apply_env(none, env_of({}));
  CHECK_FALSE(none.reserve_bytes);
  CHECK(compute_budget(r, none).reserve_bytes == 128 * gib / 10);

  // A cap above what the reserve leaves does not bind.
  budget_options loose = o;
  loose.cap_bytes = 500 * gib;
  CHECK(compute_budget(r, loose).left_bytes == compute_budget(r, none).left_bytes);

  for (const char* bad : {"", "abc", "-1", "1e99", "nan", "4 GiB"}) {
    budget_options b = o;
    CHECK_THROWS_WITH(apply_env(b, env_of({{"TF_MEMORY_RESERVE_GIB", bad}})),
                      Contains("TF_MEMORY_RESERVE_GIB"));
  }
}

TEST_CASE("the lines: parked from 0.25 GiB, then the start-up line") {
  const auto o = options(gib / 4, 131072, 2);
  const auto small = compute_budget(host_reading(128 * gib, 96 * gib, 245 * mib), o);
  REQUIRE(small.lines.size() == 1);
  const auto b = compute_budget(host_reading(128 * gib, 96 * gib, gib / 4), o);
  REQUIRE(b.lines.size() == 2);
  CHECK(b.lines[0] == *parked_line(gib / 4));
  const auto expected = fmt::format(
      "CPU (host memory): model 0.25 GiB; 2 streams at once, {:.2f} GiB each at a 131072-token "
      "window, of {:.1f} GiB left after a {:.1f} GiB reserve; KV pages {} (page 16 tokens); "
      "prompt_cache_budget_bytes {}",
      to_gib(b.bytes_per_stream), to_gib(b.left_bytes), to_gib(b.reserve_bytes), b.kv_pages,
      b.prompt_cache_budget_bytes);
  CHECK(b.lines[1] == expected);
  // The shape of TensorFold's line, whatever the counts.
  const std::regex shape(
      R"(^CPU \(host memory\): model \d+\.\d\d GiB; \d+ streams? at once, \d+\.\d\d GiB each at a \d+-token window, of \d+\.\d GiB left after a \d+\.\d GiB reserve; KV pages \d+ \(page \d+ tokens\); prompt_cache_budget_bytes \d+$)");
  CHECK(std::regex_match(b.lines[1], shape));
  auto one = o;
  one.parallel = 1;
  one.device_label = "CUDA sm_121 device 0 (NVIDIA GB10)";
  CHECK_THAT(compute_budget(host_reading(128 * gib, 96 * gib, 0), one).lines.back(),
             Contains("CUDA sm_121 device 0 (NVIDIA GB10): model 0.25 GiB; 1 stream at once"));
}

TEST_CASE("over ranks, rank 0 sizes by the smallest room and logs its own parked share") {
  const std::vector<rank_report> ranks{{host_reading(128 * gib, 96 * gib, gib), 10 * gib},
                                       {host_reading(128 * gib, 60 * gib, 0), 10 * gib},
                                       {host_reading(128 * gib, 90 * gib, 0), 10 * gib}};
  const auto o = options(10 * gib, 8192, std::nullopt);
  const auto b = compute_budget(ranks, o, gib);
  CHECK(b.smallest_rank == 1);
  CHECK(b.left_bytes == 60 * gib - 128 * gib / 10 - 10 * gib);
  CHECK(b.parked_bytes == gib);
  REQUIRE(b.lines.size() == 2);
  CHECK(b.lines[0] == *parked_line(gib));
  CHECK_THAT(b.lines[1], Contains("rank 1's room is the smallest (60.0 GiB)"));
  const std::vector<rank_report> own{ranks[1], ranks[0]};
  const auto b0 = compute_budget(own, o, 0);
  CHECK(b0.smallest_rank == 0);
  CHECK(b0.lines.size() == 1);
  CHECK_THAT(b0.lines[0], !Contains("smallest"));
}

TEST_CASE("start_budget reads once; a discrete start never reads zoneinfo") {
  const auto o = options(10 * gib, 8192, std::nullopt);
  std::vector<std::string> asked;
  const proc_reader proc = [&](std::string_view path) -> std::optional<std::string> {
    asked.emplace_back(path);
    if (path == "/proc/meminfo") return tf_memory_test::meminfo_text(128 * gib, 96 * gib, 90 * gib);
    if (path == "/proc/zoneinfo")
      return tf_memory_test::zone(0, "Normal", {{(6 * gib) / 4096 + 100, 100}});
    FAIL("unexpected read " << std::string(path));
    return std::nullopt;
  };
  const auto h = start_budget(memory_kind::unified, proc, nullptr, o, env_of({}), 4096);
  CHECK(h.pool_bytes == 102 * gib);
  CHECK(asked == std::vector<std::string>{"/proc/meminfo", "/proc/zoneinfo"});

  const proc_reader must_not_read = [](std::string_view path) -> std::optional<std::string> {
    FAIL("the discrete path read " << std::string(path));
    return std::nullopt;
  };
  const device_reader device = [] { return device_memory{100 * gib, 141 * gib}; };
  const auto d = start_budget(memory_kind::discrete, must_not_read, device, o, env_of({}), 4096);
  CHECK(d.reserve_bytes == 141 * gib / 32);
  CHECK(d.parked_bytes == 0);
  CHECK(d.left_bytes == 100 * gib - 141 * gib / 32 - 10 * gib);
  CHECK_THAT(d.lines.back(), Contains("GPU (device memory): "));
}

TEST_CASE("over ranks, the rank with the least room after its own weights sizes the start") {
  auto report = [](std::uint64_t total, std::uint64_t pool, std::uint64_t weights) {
    pool_reading r;
    r.total_bytes = total;
    r.available_bytes = r.pool_bytes = pool;
    return rank_report{r, weights};
  };
  const auto o = options(0, 8192, std::nullopt);
  auto alone = [&](rank_report const& r) {
    auto one = o;
    one.model_bytes = r.model_bytes;
    return compute_budget(r.room, one);
  };
  SECTION("the smallest machine, equal shares") {
    const std::vector<rank_report> ranks{
        report(128 * gib, 100 * gib, 10 * gib), report(128 * gib, 90 * gib, 10 * gib),
        report(128 * gib, 95 * gib, 10 * gib), report(128 * gib, 90 * gib, 10 * gib)};
    const auto b = compute_budget(ranks, o, 0);
    CHECK(b.smallest_rank == 1);
    CHECK(b.streams == alone(ranks[1]).streams);
    CHECK(b.model_bytes == 10 * gib);
    CHECK_THAT(b.lines.back(), Contains("rank 1's room is the smallest (90.0 GiB)"));
  }
  SECTION("a larger machine holding more weights has less room left") {
    const std::vector<rank_report> ranks{report(128 * gib, 80 * gib, 10 * gib),
                                         report(128 * gib, 90 * gib, 30 * gib)};
    const auto b = compute_budget(ranks, o, 0);
    CHECK(b.smallest_rank == 1);
    CHECK(b.model_bytes == 30 * gib);
    CHECK(b.left_bytes == alone(ranks[1]).left_bytes);
  }
  SECTION("ties go to the lowest rank, a reserve follows each rank's own memory") {
    // 64 GiB keeps a 6.4 GiB reserve, 40 GiB the 4 GiB floor: the same room left on both.
    const auto usable = 40 * gib - default_reserve_bytes(memory_kind::host, 64 * gib);
    const auto pool1 = usable + default_reserve_bytes(memory_kind::host, 40 * gib);
    std::vector<rank_report> ranks{report(64 * gib, 40 * gib, 0), report(40 * gib, pool1, 0)};
    CHECK(compute_budget(ranks, o, 0).smallest_rank == 0);
    ranks[1].room.pool_bytes -= 1;
    CHECK(compute_budget(ranks, o, 0).smallest_rank == 1);
  }
  SECTION("a rank whose share does not fit refuses the start, naming the shortfall") {
    const std::vector<rank_report> ranks{report(128 * gib, 100 * gib, 10 * gib),
                                         report(128 * gib, 20 * gib, 10 * gib)};
    CHECK_THROWS_WITH(compute_budget(ranks, o, 0), Contains("the model does not fit"));
  }
  CHECK_THROWS_AS(compute_budget(std::span<const rank_report>{}, o, 0), tf::error);
}
