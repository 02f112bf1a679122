#pragma once
/// A fixed array of zeros in anonymous memory the kernel hands out only when first written, so a
/// KV store sized for the whole budget is resident only as far as streams have used it.
#include <tf/error.hpp>

#include <sys/mman.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

namespace tf::backend::cpu_parts {

template <class T>
class zeroed_array {
  static_assert(std::is_trivially_copyable_v<T>, "zeroed_array holds plain numbers");

 public:
  zeroed_array() = default;
  explicit zeroed_array(std::size_t n) : size_(n) {
    if (n == 0) return;
    void* p = ::mmap(nullptr, bytes(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      int const e = errno;
      throw error("tf: cannot reserve {} bytes of KV storage: {}", bytes(), std::strerror(e));
    }
    data_ = static_cast<T*>(p);
  }
  zeroed_array(zeroed_array&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  zeroed_array& operator=(zeroed_array&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  zeroed_array(zeroed_array const&) = delete;
  zeroed_array& operator=(zeroed_array const&) = delete;
  ~zeroed_array() { release(); }

  T* data() { return data_; }
  T const* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  void release() {
    if (data_) ::munmap(data_, bytes());
    data_ = nullptr;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace tf::backend::cpu_parts
