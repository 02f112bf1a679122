// tf-memory: this machine's memory reading and the start-up budget it would give, or why a start
// would be refused (exit 1 with the refusal message).
#include <tf/error.hpp>
#include <tf/memory/budget.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace {

using namespace tf::memory;

std::string bytes_and_gib(std::uint64_t b) {
  return fmt::format("{:.2f} GiB ({} bytes)", to_gib(b), b);
}

const char* format_name(zoneinfo_format f) {
  switch (f) {
    case zoneinfo_format::none:
      return "no per-CPU lists";
    case zoneinfo_format::high_min:
      return "count: beyond high_min: (kernel 6.7+)";
    case zoneinfo_format::pre_high_min:
      return "count: beyond a fixed 512 MiB (before 6.7)";
    case zoneinfo_format::bad:
      return "unreadable, counted as 0";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tf-memory: this machine's memory reading and the start-up budget it would give"};
  double model_gib = 0;
  std::uint64_t context = 4096;
  std::string parallel = "auto";
  std::uint64_t kv_bytes_per_token = 0, sliding_bytes = 0;
  std::uint32_t page_tokens = 16, max_auto = 64;
  std::optional<std::string> reserve_gib, cap_gib, discrete_free_gib, discrete_total_gib;
  std::optional<std::string> meminfo_path, zoneinfo_path;
  bool unified = false;
  app.add_option("--model-gib", model_gib, "the model's size as loaded, GiB")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--context", context, "the window per stream, tokens")->check(CLI::PositiveNumber);
  app.add_option("--parallel", parallel, "streams at once: auto or N");
  app.add_option(
      "--kv-bytes-per-token", kv_bytes_per_token,
      "full-attention KV bytes per token (layers x kv heads x head dim x 2 x dtype bytes)");
  app.add_option("--sliding-bytes-per-stream", sliding_bytes,
                 "a fixed sliding-window ring per stream, bytes");
  app.add_option("--page-tokens", page_tokens, "tokens per KV page")->check(CLI::PositiveNumber);
  app.add_option("--max-auto-streams", max_auto, "the most streams --parallel auto serves")
      ->check(CLI::PositiveNumber);
  app.add_option("--reserve-gib", reserve_gib,
                 "reserve override, GiB (else TF_MEMORY_RESERVE_GIB, else the default)");
  app.add_option("--cap-gib", cap_gib, "the most tf may use, GiB (else TF_MEMORY_CAP_GIB)");
  app.add_option("--discrete-free-gib", discrete_free_gib,
                 "size a discrete card with this much free, GiB");
  app.add_option("--discrete-total-gib", discrete_total_gib,
                 "the discrete card's total, GiB (default: its free)");
  app.add_flag("--unified", unified, "host RAM shared with a GPU (read like host memory)");
  app.add_option("--meminfo", meminfo_path,
                 "read a captured /proc/meminfo instead of this machine's");
  app.add_option("--zoneinfo", zoneinfo_path,
                 "read a captured /proc/zoneinfo instead of this machine's");
  CLI11_PARSE(app, argc, argv);

  try {
    budget_options o;
    o.model_bytes = parse_gib(fmt::format("{}", model_gib), "--model-gib");
    o.window_tokens = context;
    o.kv_bytes_per_token = kv_bytes_per_token;
    o.sliding_bytes_per_stream = sliding_bytes;
    o.page_tokens = page_tokens;
    o.max_auto_streams = max_auto;
    if (parallel != "auto") {
      const auto n = detail::parse_unsigned(parallel);
      if (!n || *n == 0 || *n > UINT32_MAX)
        throw tf::error("--parallel: '{}' is not auto or a stream count from 1", parallel);
      o.parallel = static_cast<std::uint32_t>(*n);
    }
    if (reserve_gib) o.reserve_bytes = parse_gib(*reserve_gib, "--reserve-gib");
    if (cap_gib) o.cap_bytes = parse_gib(*cap_gib, "--cap-gib");
    apply_env(o, system_env_reader());

    const auto system = system_proc_reader();
    // Keeps the zoneinfo text the pool read, so what is printed is that same reading.
    std::optional<std::string> zones;
    const proc_reader proc = [&](std::string_view path) -> std::optional<std::string> {
      const bool is_zones = path == "/proc/zoneinfo";
      auto text = path == "/proc/meminfo" && meminfo_path ? system(*meminfo_path)
                  : is_zones && zoneinfo_path             ? system(*zoneinfo_path)
                                                          : system(path);
      if (is_zones) zones = text;
      return text;
    };
    const auto page = system_page_size();

    pool_reading reading;
    if (discrete_free_gib) {
      const auto free = parse_gib(*discrete_free_gib, "--discrete-free-gib");
      const auto total =
          discrete_total_gib ? parse_gib(*discrete_total_gib, "--discrete-total-gib") : free;
      reading = read_device_pool([&] { return device_memory{free, total}; });
      fmt::print("discrete device: free {}, total {}\n", bytes_and_gib(free), bytes_and_gib(total));
    } else {
      reading = read_proc_pool(proc, page, unified ? memory_kind::unified : memory_kind::host);
      const auto z = zones ? parse_zoneinfo(*zones, page) : zoneinfo_reading{};
      fmt::print("MemTotal      {}\n", bytes_and_gib(reading.total_bytes));
      fmt::print("MemAvailable  {}\n", bytes_and_gib(reading.available_bytes));
      fmt::print("parked        {}: {} ({} lists, {} pages listed, page {} bytes){}\n",
                 bytes_and_gib(reading.parked_bytes),
                 zones ? format_name(z.format) : "no /proc/zoneinfo", z.lists, z.count_pages, page,
                 reading.parked_bytes < z.parked_bytes ? ", capped at MemTotal" : "");
      fmt::print("pool          {}\n", bytes_and_gib(reading.pool_bytes));
    }

    const auto b = compute_budget(reading, o);
    for (const auto& l : b.lines) fmt::print("{}\n", l);
    fmt::print("reserve {}; left {}; {} KV pages of {} bytes\n", bytes_and_gib(b.reserve_bytes),
               bytes_and_gib(b.left_bytes), b.kv_pages, b.page_bytes);
    return 0;
  } catch (const tf::error& e) {
    fmt::print(stderr, "tf-memory: {}\n", e.what());
    return 1;
  }
}
