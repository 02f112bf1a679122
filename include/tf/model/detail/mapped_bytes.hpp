#pragma once
/// A read-only byte range: a private mmap of a file, a copy of it read into anonymous memory on
/// huge pages, or an owned vector.
#include <tf/error.hpp>
#include <tf/model/load_mode.hpp>
#include <tf/model/read_progress.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

namespace tf::model::detail {

/// Movable, not copyable; data() stays put across moves, so views into it survive a move.
class mapped_bytes {
 public:
  mapped_bytes() = default;

  /// `path` mapped or read into memory, as `mode` says.
  static mapped_bytes load(const std::filesystem::path& path, load_mode mode) {
    return mode == load_mode::read ? read(path) : map(path);
  }

  /// Maps `path` read-only (MAP_PRIVATE); an empty file maps to an empty range.
  static mapped_bytes map(const std::filesystem::path& path) {
    mapped_bytes m;
    const int fd = open_regular(path, m.size_);
    if (m.size_ > 0) {
      void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        throw error("tf: cannot mmap {} ({} bytes): {}", path.string(), m.size_, std::strerror(e));
      }
      m.map_ = p;
      m.map_len_ = m.size_;
      m.data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);
    return m;
  }

  /// Reads `path` into private anonymous memory, 2 MiB aligned and advised for transparent huge
  /// pages, then makes it read-only: the CPU matvecs stream every weight once per token, and
  /// 4 KiB pages of a file mapping cost them TLB misses and prefetches that stop at page ends.
  static mapped_bytes read(const std::filesystem::path& path) {
    mapped_bytes m;
    const int fd = open_regular(path, m.size_);
    if (m.size_ == 0) {
      ::close(fd);
      return m;
    }
    constexpr std::size_t huge = std::size_t{2} << 20;
    m.map_len_ = (m.size_ + huge - 1) / huge * huge + huge;
    void* p =
        ::mmap(nullptr, m.map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      m.map_len_ = 0;
      throw error("tf: cannot allocate {} bytes to read {} into: {}", m.size_, path.string(),
                  std::strerror(e));
    }
    m.map_ = p;
    auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(p) + huge - 1) /
                                              huge * huge);
    ::madvise(base, m.map_len_ - huge, MADV_HUGEPAGE);  // a hint: 4 KiB pages still work
    std::size_t done = 0;
    // Chunks of 64 MiB, so bytes_read() moves while a file of GiBs is read.
    constexpr std::size_t chunk = std::size_t{64} << 20;
    while (done < m.size_) {
      ssize_t n =
          ::pread(fd, base + done, std::min(chunk, m.size_ - done), static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int e = n < 0 ? errno : 0;
        ::close(fd);
        throw error("tf: reading {} stopped at byte {} of {}: {}", path.string(), done, m.size_,
                    e ? std::strerror(e) : "unexpected end of file");
      }
      done += static_cast<std::size_t>(n);
      bytes_read().fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
    }
    ::close(fd);
    ::mprotect(p, m.map_len_, PROT_READ);
    m.data_ = base;
    m.copy_ = true;
    return m;
  }

  /// Takes ownership of `bytes` (for tests and fuzzing).
  static mapped_bytes own(std::vector<std::byte> bytes) {
    mapped_bytes m;
    m.owned_ = std::move(bytes);
    m.data_ = m.owned_.data();
    m.size_ = m.owned_.size();
    m.copy_ = true;
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

  /// Runs fn(std::byte*) on bytes [at, at + len) with them writable meanwhile, and returns true,
  /// when they are this process's own copy (read into memory or owned); a file mapping is the
  /// page cache's, so there it runs nothing and returns false.
  template <class Fn>
  bool rewrite(std::size_t at, std::size_t len, Fn&& fn) {
    if (!copy_ || at > size_ || len > size_ - at) return false;
    auto* p = const_cast<std::byte*>(data_) + at;
    if (!map_) {
      fn(p);
      return true;
    }
    auto const page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    auto const lo = reinterpret_cast<std::uintptr_t>(p) / page * page;
    auto const hi = (reinterpret_cast<std::uintptr_t>(p) + len + page - 1) / page * page;
    if (::mprotect(reinterpret_cast<void*>(lo), hi - lo, PROT_READ | PROT_WRITE) != 0)
      throw error("tf: cannot make {} model bytes writable: {}", len, std::strerror(errno));
    fn(p);
    ::mprotect(reinterpret_cast<void*>(lo), hi - lo, PROT_READ);
    return true;
  }

 private:
  // An O_RDONLY descriptor of the regular file `path` and its size; throws otherwise.
  static int open_regular(const std::filesystem::path& path, std::size_t& size) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw error("tf: cannot open {}: {}", path.string(), std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw error("tf: {} is not a regular file", path.string());
    }
    size = static_cast<std::size_t>(st.st_size);
    return fd;
  }

  void swap(mapped_bytes& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(map_len_, o.map_len_);
    std::swap(copy_, o.copy_);
    owned_.swap(o.owned_);
  }
  void release() noexcept {
    if (map_) ::munmap(map_, map_len_);
    map_ = nullptr;
    map_len_ = 0;
    data_ = nullptr;
    size_ = 0;
    copy_ = false;
    owned_.clear();
  }

  void* map_ = nullptr;
  std::size_t map_len_ = 0;  // bytes mapped at map_ (the read copy adds alignment)
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool copy_ = false;  // read into memory or owned, so rewrite() may change it
  std::vector<std::byte> owned_;
};

}  // namespace tf::model::detail
