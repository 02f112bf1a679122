#pragma once
/// Reader for /proc/zoneinfo text: the free pages parked on the per-CPU lists beyond their resting
/// level, which MemAvailable leaves out.
#include <tf/error.hpp>
#include <tf/memory/meminfo.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace tf::memory {

/// Resting level assumed for all lists together on kernels before 6.7, which print no high_min:.
inline constexpr std::uint64_t pre_high_min_resting_bytes = std::uint64_t{512} << 20;

/// Which zoneinfo layout a reading found.
enum class zoneinfo_format {
  none,          ///< no per-CPU list under any zone's pagesets
  high_min,      ///< kernel 6.7 and later: each list prints count: and high_min:
  pre_high_min,  ///< before 6.7: count: only, a fixed resting level is subtracted
  bad,           ///< garbled, negative, binary, overflowing or mixed text: counts nothing
};

/// What a zoneinfo reading found; parked_bytes is 0 unless format is high_min or pre_high_min.
struct zoneinfo_reading {
  zoneinfo_format format = zoneinfo_format::none;
  std::uint64_t lists = 0;         ///< per-CPU lists found under pagesets
  std::uint64_t count_pages = 0;   ///< sum of their count: values
  std::uint64_t parked_pages = 0;  ///< pages beyond the resting level (high_min only)
  std::uint64_t parked_bytes = 0;  ///< the bytes the budget may add to MemAvailable
};

namespace detail {

/// One pass over zoneinfo lines: zone header, then pagesets, then cpu: lists until the zone's
/// next field; everything outside a list is ignored.
class zoneinfo_scanner {
 public:
  explicit zoneinfo_scanner(std::uint64_t page_size) : page_size_(page_size) {}

  zoneinfo_reading scan(std::string_view text) {
    std::size_t pos = 0;
    while (pos < text.size() && !bad_) {
      auto nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      line(text.substr(pos, nl - pos));
      pos = nl + 1;
    }
    close_list();
    return result();
  }

 private:
  static bool binary(std::string_view line) {
    for (char ch : line) {
      const auto c = static_cast<unsigned char>(ch);
      if ((c < 0x20 && c != '\t' && c != '\r') || c >= 0x7f) return true;
    }
    return false;
  }

  void line(std::string_view raw) {
    if (binary(raw)) {
      bad_ = true;
      return;
    }
    const auto s = trim(raw);
    if (s.starts_with("Node ")) {
      close_list();
      in_zone_ = true;
      in_pagesets_ = false;
      return;
    }
    if (s == "pagesets") {
      close_list();
      in_pagesets_ = in_zone_;
      return;
    }
    if (!in_pagesets_) return;
    const auto colon = s.find(':');
    const auto key = s.substr(0, colon);
    const auto value =
        colon == std::string_view::npos ? std::string_view{} : trim(s.substr(colon + 1));
    if (key == "cpu") {
      close_list();
      if (!parse_unsigned(value)) bad_ = true;
      in_list_ = true;
      return;
    }
    if (key == "vm stats threshold") {
      close_list();
      return;
    }
    const bool list_field =
        key == "count" || key == "high" || key == "batch" || key == "high_min" || key == "high_max";
    if (!list_field || colon == std::string_view::npos) {
      // The zone's next field ends its pagesets; later count: lines are not a list's.
      close_list();
      in_pagesets_ = false;
      return;
    }
    if (!in_list_) return;
    const auto v = parse_unsigned(value);
    if (!v) {
      bad_ = true;
      return;
    }
    if (key == "count") set(count_, *v);
    if (key == "high_min") set(high_min_, *v);
  }

  void set(std::optional<std::uint64_t>& field, std::uint64_t v) {
    if (field) bad_ = true;
    field = v;
  }

  static bool add(std::uint64_t& sum, std::uint64_t v) {
    if (sum > UINT64_MAX - v) return false;
    sum += v;
    return true;
  }

  void close_list() {
    if (!in_list_) return;
    in_list_ = false;
    const auto count = count_;
    const auto high_min = high_min_;
    count_.reset();
    high_min_.reset();
    if (!count) {
      bad_ = true;
      return;
    }
    ++lists_;
    if (!add(count_pages_, *count)) bad_ = true;
    if (high_min) {
      saw_high_min_ = true;
      if (*count > *high_min && !add(parked_pages_, *count - *high_min)) bad_ = true;
    } else {
      saw_pre_high_min_ = true;
    }
  }

  zoneinfo_reading result() const {
    zoneinfo_reading r;
    r.lists = lists_;
    r.count_pages = count_pages_;
    if (bad_ || (saw_high_min_ && saw_pre_high_min_)) {
      r.format = zoneinfo_format::bad;
      r.parked_pages = 0;
      return r;
    }
    if (lists_ == 0) return r;
    if (saw_high_min_) {
      r.format = zoneinfo_format::high_min;
      r.parked_pages = parked_pages_;
      if (parked_pages_ > UINT64_MAX / page_size_) return bad_reading(r);
      r.parked_bytes = parked_pages_ * page_size_;
      return r;
    }
    r.format = zoneinfo_format::pre_high_min;
    if (count_pages_ > UINT64_MAX / page_size_) return bad_reading(r);
    const auto listed = count_pages_ * page_size_;
    r.parked_bytes = listed > pre_high_min_resting_bytes ? listed - pre_high_min_resting_bytes : 0;
    r.parked_pages = r.parked_bytes / page_size_;
    return r;
  }

  static zoneinfo_reading bad_reading(zoneinfo_reading r) {
    r.format = zoneinfo_format::bad;
    r.parked_pages = 0;
    r.parked_bytes = 0;
    return r;
  }

  std::uint64_t page_size_;
  bool bad_ = false;
  bool in_zone_ = false;
  bool in_pagesets_ = false;
  bool in_list_ = false;
  bool saw_high_min_ = false;
  bool saw_pre_high_min_ = false;
  std::optional<std::uint64_t> count_, high_min_;
  std::uint64_t lists_ = 0, count_pages_ = 0, parked_pages_ = 0;
};

}  // namespace detail

/// Reads /proc/zoneinfo text with the system's page size; throws tf::error only for page_size 0.
inline zoneinfo_reading parse_zoneinfo(std::string_view text, std::uint64_t page_size) {
  if (page_size == 0)
    throw tf::error("parse_zoneinfo: page_size is 0 (expected the system page size, e.g. 4096)");
  return detail::zoneinfo_scanner(page_size).scan(text);
}

/// Free bytes parked on the per-CPU lists beyond their resting level; 0 for any bad text.
inline std::uint64_t parked_bytes(std::string_view zoneinfo_text, std::uint64_t page_size) {
  return parse_zoneinfo(zoneinfo_text, page_size).parked_bytes;
}

}  // namespace tf::memory
