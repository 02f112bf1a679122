#pragma once
/// A read-only byte range that is either a private mmap of a file or an owned vector.
#include <tf/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

namespace tf::model::detail {

/// Movable, not copyable; data() stays put across moves, so views into it survive a move.
class mapped_bytes {
 public:
  mapped_bytes() = default;

  /// Maps `path` read-only (MAP_PRIVATE); an empty file maps to an empty range.
  static mapped_bytes map(const std::filesystem::path& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw error("tf: cannot open {}: {}", path.string(), std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw error("tf: {} is not a regular file", path.string());
    }
    mapped_bytes m;
    m.size_ = static_cast<std::size_t>(st.st_size);
    if (m.size_ > 0) {
      void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        throw error("tf: cannot mmap {} ({} bytes): {}", path.string(), m.size_, std::strerror(e));
      }
      m.map_ = p;
      m.data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);
    return m;
  }

  /// Takes ownership of `bytes` (for tests and fuzzing).
  static mapped_bytes own(std::vector<std::byte> bytes) {
    mapped_bytes m;
    m.owned_ = std::move(bytes);
    m.data_ = m.owned_.data();
    m.size_ = m.owned_.size();
    return m;
  }

  mapped_bytes(const mapped_bytes&) = delete;
  mapped_bytes& operator=(const mapped_bytes&) = delete;
  mapped_bytes(mapped_bytes&& o) noexcept { swap(o); }
  mapped_bytes& operator=(mapped_bytes&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~mapped_bytes() { release(); }

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void swap(mapped_bytes& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    owned_.swap(o.owned_);
  }
  void release() noexcept {
    if (map_) ::munmap(map_, size_);
    map_ = nullptr;
    data_ = nullptr;
    size_ = 0;
    owned_.clear();
  }

  void* map_ = nullptr;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::vector<std::byte> owned_;
};

}  // namespace tf::model::detail
