#pragma once
/// The CUDA runtime calls backend::cuda makes, defined over host memory, so that the backend's own
/// code runs in a test binary that links no libcudart and sees no GPU. One "device" (sm_90,
/// discrete) whose memory is the heap: every allocation is recorded, filled with 0xff bytes (NaN
/// as f32, -1 as an integer) so that reading what was never written shows, and checked by the
/// copies and the host launchers (fake_cuda::on_device). Include this file in exactly one
/// translation unit: it defines the runtime's extern "C" functions.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

namespace fake_cuda {

/// The fake device's total memory, as cudaMemGetInfo and cudaGetDeviceProperties report it.
inline constexpr std::size_t total_bytes = std::size_t{8} << 30;
inline constexpr char const* device_name = "tf host emulation";

/// What a test can change: devices visible, and the next allocation failing.
struct settings {
  int devices = 1;
  bool fail_next_malloc = false;
};
inline settings& config() {
  static settings s;
  return s;
}

/// Live allocations, base address -> bytes.
inline std::map<std::uintptr_t, std::size_t>& allocations() {
  static std::map<std::uintptr_t, std::size_t> a;
  return a;
}

inline std::size_t live_bytes() {
  std::size_t n = 0;
  for (auto const& [base, bytes] : allocations()) n += bytes;
  return n;
}

/// True where [p, p + bytes) lies inside one live allocation.
inline bool on_device(void const* p, std::size_t bytes) {
  auto const at = reinterpret_cast<std::uintptr_t>(p);
  auto const& a = allocations();
  auto it = a.upper_bound(at);
  if (it == a.begin()) return false;
  --it;
  return at >= it->first && at - it->first <= it->second && bytes <= it->second - (at - it->first);
}

/// Bytes copied from the device to the host so far (what a test reads to see what crossed back).
inline std::size_t& to_host_bytes() {
  static std::size_t n = 0;
  return n;
}

/// The error a sticky failure leaves for cudaGetLastError.
inline cudaError_t& pending() {
  static cudaError_t e = cudaSuccess;
  return e;
}

// A copy's direction against where its pointers really are: a backend that names the wrong kind
// (or hands a host pointer to the device side) gets cudaErrorInvalidValue, as a real copy could.
inline bool direction_ok(void* dst, void const* src, std::size_t n, cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return on_device(dst, n) && !on_device(src, 1);
    case cudaMemcpyDeviceToHost:
      return !on_device(dst, 1) && on_device(src, n);
    case cudaMemcpyDeviceToDevice:
      return on_device(dst, n) && on_device(src, n);
    default:
      return false;
  }
}

}  // namespace fake_cuda

extern "C" {

cudaError_t CUDARTAPI cudaGetLastError(void) {
  cudaError_t const e = fake_cuda::pending();
  fake_cuda::pending() = cudaSuccess;
  return e;
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    default:
      return "cudaErrorUnknown";
  }
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    default:
      return "unknown error";
  }
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  if (!count) return cudaErrorInvalidValue;
  *count = 0;
  if (fake_cuda::config().devices <= 0) return fake_cuda::pending() = cudaErrorNoDevice;
  *count = fake_cuda::config().devices;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (device < 0 || device >= fake_cuda::config().devices) return cudaErrorInvalidDevice;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return cudaErrorInvalidValue;
  if (device < 0 || device >= fake_cuda::config().devices) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, fake_cuda::device_name, sizeof(prop->name) - 1);
  prop->totalGlobalMem = fake_cuda::total_bytes;
  prop->major = 9;
  prop->minor = 0;
  prop->integrated = 0;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free, size_t* total) {
  if (!free || !total) return cudaErrorInvalidValue;
  *total = fake_cuda::total_bytes;
  *free = fake_cuda::total_bytes - fake_cuda::live_bytes();
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return cudaErrorInvalidValue;
  *devPtr = nullptr;
  if (fake_cuda::config().fail_next_malloc || size > fake_cuda::total_bytes) {
    fake_cuda::config().fail_next_malloc = false;
    return cudaErrorMemoryAllocation;
  }
  // 256-byte aligned, as cudaMalloc's pointers are.
  void* p = std::aligned_alloc(256, (size + 256) / 256 * 256);
  if (!p) return cudaErrorMemoryAllocation;
  std::memset(p, 0xff, size);
  fake_cuda::allocations()[reinterpret_cast<std::uintptr_t>(p)] = size;
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void* devPtr) {
  if (!devPtr) return cudaSuccess;
  auto& a = fake_cuda::allocations();
  auto const it = a.find(reinterpret_cast<std::uintptr_t>(devPtr));
  if (it == a.end()) return cudaErrorInvalidValue;
  a.erase(it);
  std::free(devPtr);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemset(void* devPtr, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (!fake_cuda::on_device(devPtr, count)) return cudaErrorInvalidValue;
  std::memset(devPtr, value, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpy(void* dst, const void* src, size_t count,
                                 enum cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  if (!fake_cuda::direction_ok(dst, src, count, kind)) return cudaErrorInvalidValue;
  if (kind == cudaMemcpyDeviceToHost) fake_cuda::to_host_bytes() += count;
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t CUDARTAPI cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, enum cudaMemcpyKind kind) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  for (size_t r = 0; r < height; ++r) {
    auto const e = cudaMemcpy(static_cast<char*>(dst) + r * dpitch,
                              static_cast<char const*>(src) + r * spitch, width, kind);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// The host launchers run each kernel as it is called: every stream is always done.
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}

}  // extern "C"
