// The weight read's progress: a line per 10% in a log, one updating line on a terminal, and
// /health answering 503 loading with the fraction read while a (test-driven) read goes on.
#include <tf/serve/load_progress.hpp>

#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "http_test_server.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using namespace std::chrono_literals;

namespace {

struct captured {
  std::vector<std::string> writes;
  std::string all() const {
    std::string s;
    for (auto const& w : writes) s += w;
    return s;
  }
};

load_progress_printer printer_into(captured& c, std::uint64_t total, bool tty) {
  return load_progress_printer(total, tty, [&c](std::string_view t) { c.writes.emplace_back(t); });
}

}  // namespace

TEST_CASE("a log gets one line per 10% of the weights, then the closing line") {
  captured c;
  std::uint64_t const total = 4000ull << 20;  // 3.91 GiB
  auto p = printer_into(c, total, false);
  for (std::uint64_t pct = 0; pct <= 100; ++pct)
    p.update(pct * (40ull << 20), 0.04 * static_cast<double>(pct));
  REQUIRE(c.writes.size() == 10);
  for (int i = 0; i < 10; ++i) {
    INFO(c.writes[i]);
    CHECK(c.writes[i].find(fmt::format("({}%)", 10 * (i + 1))) != std::string::npos);
    CHECK(c.writes[i].starts_with("tf: reading weights: "));
    CHECK(c.writes[i].ends_with("\n"));
    CHECK(c.writes[i].find('\r') == std::string::npos);
  }
  // 400 MiB after 0.4 s: 1000 MiB/s, 3.6 s to go.
  CHECK(c.writes[0] ==
        "tf: reading weights: 400.00 MiB of 3.91 GiB (10%), 1000.00 MiB/s, ETA 4 s\n");
  CHECK(c.writes[9].find("ETA 0 s") != std::string::npos);
  p.finish(total, 4.0);
  REQUIRE(c.writes.size() == 11);
  CHECK(c.writes[10] == "tf: read 3.91 GiB of weights in 4.0 s (1000.00 MiB/s)\n");
  p.update(total, 6.0);  // after finish nothing more is printed
  CHECK(c.writes.size() == 11);
}

TEST_CASE("a jump over several steps prints one line, at the step reached") {
  captured c;
  auto p = printer_into(c, 1000, false);
  p.update(0, 0.1);  // nothing read yet: nothing to say
  CHECK(c.writes.empty());
  p.update(550, 1.0);
  p.update(590, 1.1);  // still in the 50% step
  p.update(1000, 2.0);
  REQUIRE(c.writes.size() == 2);
  CHECK(c.writes[0].find("(55%)") != std::string::npos);
  CHECK(c.writes[1].find("(100%)") != std::string::npos);
}

TEST_CASE("a terminal gets one line rewritten in place, ended by the closing line") {
  captured c;
  auto p = printer_into(c, 100ull << 20, true);
  for (int i = 1; i <= 5; ++i) p.update(static_cast<std::uint64_t>(i) << 20, 0.01 * i);
  REQUIRE(c.writes.size() == 5);
  for (auto const& w : c.writes) {
    CHECK(w.starts_with("\rtf: reading weights: "));
    CHECK(w.find('\n') == std::string::npos);
    CHECK(w.ends_with("\x1b[K"));
  }
  CHECK(c.writes[4].find("5.00 MiB of 100.00 MiB (5%)") != std::string::npos);
  p.finish(100ull << 20, 1.0);
  CHECK(c.writes.back() == "\rtf: read 100.00 MiB of weights in 1.0 s (100.00 MiB/s)\x1b[K\n");
}

TEST_CASE("/health answers 503 loading with the fraction read while the weights load") {
  test::live_server s({}, {}, 0);  // listening, no model yet
  auto c = s.client();
  std::atomic<std::uint64_t> read{0};
  std::uint64_t const total = 1000;
  captured lines;
  load_progress_watch watch([&read] { return read.load(); }, total,
                            printer_into(lines, total, false),
                            [&s](double f) { s.server->set_progress(f); }, 10ms);
  // The fraction /health reports once the watcher has seen `n` bytes.
  auto health_at = [&](std::uint64_t n) {
    read.store(n);
    nlohmann::json j;
    for (int i = 0; i < 300; ++i) {
      auto r = c.Get("/health");
      REQUIRE(r);
      REQUIRE(r->status == 503);
      j = nlohmann::json::parse(r->body);
      if (j["progress"].get<double>() == static_cast<double>(n) / total) break;
      std::this_thread::sleep_for(5ms);
    }
    return j;
  };
  auto j = health_at(400);
  CHECK(j["status"] == "loading");
  CHECK(j["progress"].get<double>() == Approx(0.4));
  CHECK(c.Get("/v1/models")->status == 503);
  CHECK(health_at(900)["progress"].get<double>() == Approx(0.9));
  read.store(total);
  watch.finish();
  CHECK(lines.all().find("tf: read ") != std::string::npos);
  s.server->set_model(std::make_shared<test::toy_served>(std::make_unique<toy_model>(64, 16),
                                                         toy_codec{}, host_config{}));
  auto r = c.Get("/health");
  REQUIRE(r);
  CHECK(r->status == 200);
}
