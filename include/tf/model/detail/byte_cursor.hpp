#pragma once
/// A bounds-checked little-endian reader over a byte range; every failure names the byte offset.
#include <tf/error.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace tf::model::detail {

static_assert(std::endian::native == std::endian::little, "tf reads little-endian files");

class byte_cursor {
 public:
  byte_cursor(const std::byte* base, std::size_t size, std::size_t pos, std::string_view where)
      : base_(base), size_(size), pos_(pos), where_(where) {}

  std::size_t pos() const { return pos_; }
  std::size_t size() const { return size_; }
  std::size_t remaining() const { return pos_ <= size_ ? size_ - pos_ : 0; }
  const std::byte* here() const { return base_ + pos_; }

  /// Throws unless `n` more bytes are there; `what` says what was expected.
  void need(std::uint64_t n, std::string_view what) const {
    if (n > remaining())
      throw error("tf: {}: at byte {}: expected {} ({} bytes), but only {} bytes remain", where_,
                  pos_, what, n, remaining());
  }

  template <class T>
  T read(std::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  void skip(std::uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += static_cast<std::size_t>(n);
  }

  /// A GGUF string: u64 length, then that many bytes.
  std::string_view read_string(std::string_view what) {
    auto at = pos_;
    auto n = read<std::uint64_t>(what);
    if (n > remaining())
      throw error("tf: {}: at byte {}: expected {} of {} bytes, but only {} bytes remain", where_,
                  at, what, n, remaining());
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }

  /// Throws a tf::error at `at` (default: here) saying what was expected and what was found.
  template <class... Args>
  [[noreturn]] void fail_at(std::size_t at, fmt::format_string<Args...> f, Args&&... args) const {
    throw error("tf: {}: at byte {}: {}", where_, at, fmt::format(f, std::forward<Args>(args)...));
  }

  std::string_view where() const { return where_; }

 private:
  const std::byte* base_;
  std::size_t size_;
  std::size_t pos_;
  std::string_view where_;
};

}  // namespace tf::model::detail
