#pragma once
/// Reader for /proc/meminfo text: MemTotal, MemAvailable and MemFree in bytes.
#include <cstdint>
#include <optional>
#include <string_view>

namespace tf::memory {

/// The three /proc/meminfo counts the budget reads, in bytes.
struct meminfo {
  std::uint64_t total_bytes = 0;      ///< MemTotal
  std::uint64_t available_bytes = 0;  ///< MemAvailable (MemFree on kernels that lack it)
  std::uint64_t free_bytes = 0;       ///< MemFree
  bool has_available = false;         ///< whether the text printed MemAvailable
};

namespace detail {

/// Parses an unsigned decimal; nullopt on no digits, a sign, another character or overflow.
inline std::optional<std::uint64_t> parse_unsigned(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

/// Strips spaces, tabs and carriage returns from both ends.
inline std::string_view trim(std::string_view s) {
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace detail

/// Parses /proc/meminfo text; nullopt when MemTotal, or both MemAvailable and MemFree, are missing
/// or garbled, so a bad reading is never mistaken for memory.
inline std::optional<meminfo> parse_meminfo(std::string_view text) {
  std::optional<std::uint64_t> total, available, free;
  bool bad = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const auto key = line.substr(0, colon);
    std::optional<std::uint64_t>* slot = key == "MemTotal"       ? &total
                                         : key == "MemAvailable" ? &available
                                         : key == "MemFree"      ? &free
                                                                 : nullptr;
    if (slot == nullptr) continue;
    auto value = detail::trim(line.substr(colon + 1));
    // The kernel prints these in kB; a line without the unit is not one we understand.
    if (value.size() < 2 || value.substr(value.size() - 2) != "kB") {
      bad = true;
      continue;
    }
    const auto kib = detail::parse_unsigned(detail::trim(value.substr(0, value.size() - 2)));
    if (!kib || *kib > UINT64_MAX / 1024 || slot->has_value()) {
      bad = true;
      continue;
    }
    *slot = *kib * 1024;
  }
  if (bad || !total || (!available && !free)) return std::nullopt;
  meminfo m;
  m.total_bytes = *total;
  m.free_bytes = free.value_or(0);
  m.has_available = available.has_value();
  m.available_bytes = available ? *available : *free;
  return m;
}

}  // namespace tf::memory
