#pragma once
/// The start-up memory budget: one pool reading sizes the weights check, the streams, the window,
/// the KV pages and the kept-prompt budget, and gives the lines the caller prints.
#include <tf/error.hpp>
#include <tf/memory/pool.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf::memory {

/// What a start asks of the budget.
struct budget_options {
  std::uint64_t model_bytes = 0;          ///< the weights as loaded
  std::uint64_t window_tokens = 0;        ///< --context
  std::optional<std::uint32_t> parallel;  ///< --parallel N; nullopt is --parallel auto
  std::uint32_t max_auto_streams = 64;    ///< the most streams --parallel auto serves
  std::uint64_t kv_bytes_per_token =
      0;  ///< full-attention KV: layers x kv heads x head dim x 2 x dtype bytes
  std::uint64_t sliding_bytes_per_stream = 0;  ///< a fixed sliding-window ring per stream
  /// Recurrent-state bytes one stream needs (hybrid families): the lane host keeps two slots per
  /// stream, its state and its prompt-end snapshot. 0: no recurrent layers.
  std::uint64_t state_bytes_per_stream = 0;
  std::uint32_t page_tokens = 16;              ///< tokens per KV page
  std::optional<std::uint64_t> reserve_bytes;  ///< --reserve-gib / TF_MEMORY_RESERVE_GIB
  std::optional<std::uint64_t> cap_bytes;      ///< --cap-gib / TF_MEMORY_CAP_GIB: the most tf uses
  std::optional<std::uint64_t>
      prompt_cache_bytes;    ///< a kept-prompt size asked for; nullopt: all left
  std::string device_label;  ///< the line's prefix; empty picks one by kind
};

/// What the budget gives a start; plain values the KV ledger and the server take as they are.
struct budget {
  std::uint64_t pool_bytes = 0;     ///< the reading's pool (after the cap, if it binds)
  std::uint64_t parked_bytes = 0;   ///< the parked share the reading counted
  std::uint64_t reserve_bytes = 0;  ///< kept back for everything else on the machine
  std::uint64_t left_bytes =
      0;  ///< pool - reserve - model, the room streams and kept prompts share
  std::uint64_t model_bytes = 0;
  std::uint32_t streams = 0;  ///< streams served at once
  std::uint64_t window_tokens = 0;
  std::uint64_t bytes_per_stream = 0;        ///< KV pages for a full window, sliding ring, state
  std::uint64_t state_bytes_per_stream = 0;  ///< of those, the recurrent state's
  std::uint64_t kv_pages = 0;                ///< full-attention KV pages for all streams
  std::uint32_t page_tokens = 0;
  std::uint64_t page_bytes = 0;                 ///< bytes of one KV page
  std::uint64_t prompt_cache_budget_bytes = 0;  ///< kept prompt states, at most what streams leave
  std::size_t smallest_rank = 0;                ///< the rank whose room sized the start
  std::vector<std::string> lines;               ///< log lines, in order; the caller prints them
};

/// The default reserve: 1/10 of RAM (at least 4 GiB) on host and unified memory, 1/32 of the
/// card (at least 1 GiB) on a discrete one.
inline std::uint64_t default_reserve_bytes(memory_kind kind, std::uint64_t total_bytes) {
  if (kind == memory_kind::discrete) return std::max(total_bytes / 32, gib);
  return std::max(total_bytes / 10, 4 * gib);
}

/// Parses a GiB count ("12", "0.5") into bytes; `what` names the flag or variable in the error.
inline std::uint64_t parse_gib(std::string_view text, std::string_view what) {
  const std::string s{detail::trim(text)};
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0 || v > 1e9)
    throw tf::error("{}: '{}' is not a GiB count (expected a number from 0 to 1e9, e.g. 12 or 0.5)",
                    what, text);
  return static_cast<std::uint64_t>(std::llround(v * static_cast<double>(gib)));
}

/// Reads an environment variable; nullopt when unset.
using env_reader = std::function<std::optional<std::string>(std::string_view name)>;

/// The env_reader for this process.
inline env_reader system_env_reader() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

/// Fills the reserve and cap from TF_MEMORY_RESERVE_GIB / TF_MEMORY_CAP_GIB where no flag set them.
inline void apply_env(budget_options& o, const env_reader& env) {
  if (!o.reserve_bytes)
    if (auto v = env("TF_MEMORY_RESERVE_GIB"))
      o.reserve_bytes = parse_gib(*v, "TF_MEMORY_RESERVE_GIB");
  if (!o.cap_bytes)
    if (auto v = env("TF_MEMORY_CAP_GIB")) o.cap_bytes = parse_gib(*v, "TF_MEMORY_CAP_GIB");
}

namespace detail {

inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, std::string_view what) {
  if (a != 0 && b > UINT64_MAX / a)
    throw tf::error("memory budget: {} overflows ({} x {})", what, a, b);
  return a * b;
}

inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, std::string_view what) {
  if (a > UINT64_MAX - b) throw tf::error("memory budget: {} overflows ({} + {})", what, a, b);
  return a + b;
}

inline std::string default_label(memory_kind kind) {
  switch (kind) {
    case memory_kind::host:
      return "CPU (host memory)";
    case memory_kind::unified:
      return "GPU (unified memory)";
    case memory_kind::discrete:
      return "GPU (device memory)";
  }
  return "memory";
}

inline std::string streams_phrase(std::uint64_t n) {
  return fmt::format("{} stream{}", n, n == 1 ? "" : "s");
}

/// What tf may use of a reading: the pool after the reserve, at most the cap (the cap bounds what
/// tf itself uses, so it applies after the reserve is kept back).
struct usable_room {
  std::uint64_t reserve_bytes = 0;
  std::uint64_t usable_bytes = 0;
  bool capped = false;  // the cap, not the reserve, bounds usable_bytes
};

inline usable_room usable_of(const pool_reading& reading, const budget_options& o) {
  usable_room u;
  u.reserve_bytes =
      o.reserve_bytes ? *o.reserve_bytes : default_reserve_bytes(reading.kind, reading.total_bytes);
  const auto after_reserve =
      reading.pool_bytes > u.reserve_bytes ? reading.pool_bytes - u.reserve_bytes : 0;
  u.capped = o.cap_bytes && *o.cap_bytes < after_reserve;
  u.usable_bytes = u.capped ? *o.cap_bytes : after_reserve;
  return u;
}

/// Sizes a start from the room `reading`; `own_parked` is the parked share this process counted.
inline budget size_start(const pool_reading& reading, const budget_options& o,
                         std::size_t smallest_rank, std::uint64_t own_parked) {
  if (o.window_tokens == 0)
    throw tf::error("memory budget: --context is 0 (expected a window of at least 1 token)");
  if (o.page_tokens == 0) throw tf::error("memory budget: page_tokens is 0 (expected e.g. 16)");
  if (o.parallel && *o.parallel == 0)
    throw tf::error("memory budget: --parallel 0 (expected auto or at least 1)");
  if (!o.parallel && o.max_auto_streams == 0)
    throw tf::error("memory budget: max_auto_streams is 0 (expected at least 1)");

  budget b;
  b.parked_bytes = own_parked;
  b.model_bytes = o.model_bytes;
  b.window_tokens = o.window_tokens;
  b.page_tokens = o.page_tokens;
  b.smallest_rank = smallest_rank;
  const auto room = usable_of(reading, o);
  b.reserve_bytes = room.reserve_bytes;
  const auto label = o.device_label.empty() ? detail::default_label(reading.kind) : o.device_label;

  const bool capped = room.capped;
  const auto usable = room.usable_bytes;
  b.pool_bytes = capped ? *o.cap_bytes + b.reserve_bytes : reading.pool_bytes;
  const auto cap_clause =
      capped ? fmt::format(" and a {:.1f} GiB cap", to_gib(*o.cap_bytes)) : std::string{};

  if (o.model_bytes > usable) {
    const auto short_by = o.model_bytes - usable;
    throw tf::error(
        "the model does not fit: model {:.2f} GiB, but {:.2f} GiB is left of a {:.2f} GiB pool "
        "after "
        "a {:.1f} GiB reserve{}; short by {:.2f} GiB ({} bytes) (see tf-memory; lower the reserve "
        "with "
        "--reserve-gib or TF_MEMORY_RESERVE_GIB, or free memory)",
        to_gib(o.model_bytes), to_gib(usable), to_gib(reading.pool_bytes), to_gib(b.reserve_bytes),
        cap_clause, to_gib(short_by), short_by);
  }
  b.left_bytes = usable - o.model_bytes;

  const auto pages_per_stream =
      o.kv_bytes_per_token == 0 ? 0 : (o.window_tokens + o.page_tokens - 1) / o.page_tokens;
  b.page_bytes = detail::checked_mul(o.kv_bytes_per_token, o.page_tokens, "the KV page size");
  b.bytes_per_stream = detail::checked_add(
      detail::checked_mul(pages_per_stream, b.page_bytes, "a stream's KV pages"),
      o.sliding_bytes_per_stream, "a stream's KV bytes");
  b.state_bytes_per_stream = o.state_bytes_per_stream;
  b.bytes_per_stream =
      detail::checked_add(b.bytes_per_stream, o.state_bytes_per_stream, "a stream's bytes");

  const auto fit = b.bytes_per_stream == 0 ? UINT64_MAX : b.left_bytes / b.bytes_per_stream;
  if (o.parallel) {
    if (fit < *o.parallel) {
      const auto need =
          detail::checked_mul(*o.parallel, b.bytes_per_stream, "the streams' KV bytes");
      const auto short_by = need - b.left_bytes;
      throw tf::error(
          "--parallel {} does not fit: {} at a {}-token window need {:.2f} GiB ({:.2f} GiB each), "
          "but {:.2f} GiB is left after the {:.2f} GiB model and a {:.1f} GiB reserve{}; short by "
          "{:.2f} GiB ({} bytes); {} {} (use --parallel auto, a smaller --context, or free "
          "memory)",
          *o.parallel, detail::streams_phrase(*o.parallel), o.window_tokens, to_gib(need),
          to_gib(b.bytes_per_stream), to_gib(b.left_bytes), to_gib(o.model_bytes),
          to_gib(b.reserve_bytes), cap_clause, to_gib(short_by), short_by,
          detail::streams_phrase(fit), fit == 1 ? "fits" : "fit");
    }
    b.streams = *o.parallel;
  } else {
    if (fit == 0) {
      const auto short_by = b.bytes_per_stream - b.left_bytes;
      throw tf::error(
          "--parallel auto fits no stream: one stream at a {}-token window needs {:.2f} GiB, but "
          "{:.2f} GiB is left after the {:.2f} GiB model and a {:.1f} GiB reserve{}; short by "
          "{:.2f} "
          "GiB ({} bytes) (use a smaller --context, or free memory)",
          o.window_tokens, to_gib(b.bytes_per_stream), to_gib(b.left_bytes), to_gib(o.model_bytes),
          to_gib(b.reserve_bytes), cap_clause, to_gib(short_by), short_by);
    }
    b.streams = static_cast<std::uint32_t>(std::min<std::uint64_t>(fit, o.max_auto_streams));
  }
  b.kv_pages = static_cast<std::uint64_t>(b.streams) * pages_per_stream;

  // Kept prompt states get only what the streams leave.
  const auto after_streams =
      b.left_bytes - static_cast<std::uint64_t>(b.streams) * b.bytes_per_stream;
  b.prompt_cache_budget_bytes =
      o.prompt_cache_bytes ? std::min(*o.prompt_cache_bytes, after_streams) : after_streams;

  if (auto l = parked_line(own_parked)) b.lines.push_back(*l);
  const auto state_clause =
      o.state_bytes_per_stream == 0
          ? std::string{}
          : fmt::format("; recurrent state {} bytes per stream", o.state_bytes_per_stream);
  auto line = fmt::format(
      "{}: model {:.2f} GiB; {} at once, {:.2f} GiB each at a {}-token window, of {:.1f} GiB left "
      "after a {:.1f} GiB reserve{}; KV pages {} (page {} tokens){}; prompt_cache_budget_bytes {}",
      label, to_gib(o.model_bytes), detail::streams_phrase(b.streams), to_gib(b.bytes_per_stream),
      o.window_tokens, to_gib(b.left_bytes), to_gib(b.reserve_bytes), cap_clause, b.kv_pages,
      o.page_tokens, state_clause, b.prompt_cache_budget_bytes);
  if (smallest_rank != 0)
    line += fmt::format("; rank {}'s room is the smallest ({:.1f} GiB)", smallest_rank,
                        to_gib(reading.pool_bytes));
  b.lines.push_back(std::move(line));
  return b;
}

}  // namespace detail

/// Sizes a start from one reading; throws tf::error naming what is short, by how much, when the
/// model or a fixed --parallel N does not fit.
inline budget compute_budget(const pool_reading& reading, const budget_options& o) {
  return detail::size_start(reading, o, 0, reading.parked_bytes);
}

/// Sizes a start over ranks (reports indexed by rank, rank 0 first) from the rank with the least
/// room left after its own weights (the lowest rank on ties): every rank then has room for the
/// streams and pages sized. `own_parked` is the parked share this process counted (each rank's
/// process logs its own).
inline budget compute_budget(std::span<const rank_report> ranks, budget_options o,
                             std::uint64_t own_parked) {
  if (ranks.empty())
    throw tf::error("memory budget: no rank reported a room (expected at least rank 0)");
  // Each rank's own cap is in its reported room already (rank 0's cap applies once sized).
  auto uncapped = o;
  uncapped.cap_bytes.reset();
  auto left = [&](const rank_report& r) {
    return static_cast<std::int64_t>(detail::usable_of(r.room, uncapped).usable_bytes) -
           static_cast<std::int64_t>(r.model_bytes);
  };
  std::size_t least = 0;
  for (std::size_t i = 1; i < ranks.size(); ++i)
    if (left(ranks[i]) < left(ranks[least])) least = i;
  o.model_bytes = ranks[least].model_bytes;
  return detail::size_start(ranks[least].room, o, least, own_parked);
}

/// Reads the pool once and sizes the start from that reading.
inline budget start_budget(memory_kind kind, const proc_reader& proc, const device_reader& device,
                           budget_options o, const env_reader& env = system_env_reader(),
                           std::uint64_t page_size = system_page_size()) {
  if (env) apply_env(o, env);
  return compute_budget(read_pool(kind, proc, device, page_size), o);
}

}  // namespace tf::memory
