#pragma once
/// The CUDA runtime as the CUDA backend uses it: errors as tf::error, owned device memory, and the
/// device's name, compute capability and memory.
#include <tf/error.hpp>
#include <tf/memory/pool.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace tf::backend::cuda_parts {

/// Throws tf::error naming `what` and the runtime's message where `e` is an error.
inline void check(cudaError_t e, char const* what) {
  if (e != cudaSuccess)
    throw error("tf: CUDA {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/// Devices the runtime sees; 0 where there is no driver or no device.
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clears the sticky "no device" error for the next call
    return 0;
  }
  return n;
}

/// What the start-up line and the memory budget need to know of a device.
struct device_info {
  int index = 0;
  std::string name;
  int sm = 0;               // compute capability, major * 10 + minor
  bool integrated = false;  // shares host RAM (GB10, Jetson): budgeted as host memory
  memory::device_memory memory;
};

/// Selects device `index` for this thread and reads it.
inline device_info query_device(int index) {
  int const n = device_count();
  if (index < 0 || index >= n)
    throw error("tf: CUDA device {} does not exist ({} device{} visible)", index, n,
                n == 1 ? "" : "s");
  check(cudaSetDevice(index), "cudaSetDevice");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  device_info d;
  d.index = index;
  d.name = p.name;
  d.sm = p.major * 10 + p.minor;
  d.integrated = p.integrated != 0;
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  d.memory = {free, total};
  return d;
}

/// The budget's reading of device `index`: its free and total bytes now.
inline memory::device_reader device_memory_reader(int index) {
  return [index] {
    check(cudaSetDevice(index), "cudaSetDevice");
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return memory::device_memory{free, total};
  };
}

/// `n` elements of T in device memory, freed with the last owner; grows without keeping its
/// contents (activations are rewritten whole by the operation that sizes them).
template <class T>
class device_array {
 public:
  device_array() = default;
  explicit device_array(std::size_t n) { resize(n); }

  void resize(std::size_t n) {
    if (n > capacity_) {
      void* p = nullptr;
      if (n > 0) check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
      mem_.reset(p, [](void* q) { cudaFree(q); });
      capacity_ = n;
    }
    size_ = n;
  }
  /// Resizes to n elements of zero.
  void assign_zero(std::size_t n) {
    resize(n);
    if (n > 0) check(cudaMemset(mem_.get(), 0, n * sizeof(T)), "cudaMemset");
  }
  /// Resizes to `n` elements and copies them from host memory.
  void upload(T const* host, std::size_t n) {
    resize(n);
    if (n > 0)
      check(cudaMemcpy(mem_.get(), host, n * sizeof(T), cudaMemcpyHostToDevice), "copy to device");
  }

  T* data() { return static_cast<T*>(mem_.get()); }
  T const* data() const { return static_cast<T const*>(mem_.get()); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  /// Elements [offset, offset + n) of this array, sharing its memory (which lives while either
  /// does); growing the view past n allocates its own.
  device_array view(std::size_t offset, std::size_t n) const {
    if (offset + n > size_)
      throw error("tf: a device view of [{}, {}) in {} elements", offset, offset + n, size_);
    device_array v;
    v.mem_ = std::shared_ptr<void>(mem_, static_cast<T*>(mem_.get()) + offset);
    v.size_ = v.capacity_ = n;
    return v;
  }

 private:
  std::shared_ptr<void> mem_;
  std::size_t size_ = 0, capacity_ = 0;
};

}  // namespace tf::backend::cuda_parts
