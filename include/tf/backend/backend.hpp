#pragma once
/// The backend concept: what the engine needs to know about where a forward runs.
#include <concepts>
#include <string_view>

namespace tf::backend {

/// Where the backend's memory lives: sizes the start-up budget (host/unified read /proc; discrete
/// reads the device's own free memory).
enum class memory_kind : unsigned char { host, unified, discrete };

template <class B>
concept backend_type = requires {
  { B::name } -> std::convertible_to<std::string_view>;
  { B::memory } -> std::convertible_to<memory_kind>;
};

/// The CPU backend: threaded SIMD kernels over host memory.
struct cpu {
  static constexpr std::string_view name = "cpu";
  static constexpr memory_kind memory = memory_kind::host;
};

/// The CUDA backend (discrete card); built only when TF_WITH_CUDA is set.
struct cuda {
  static constexpr std::string_view name = "cuda";
  static constexpr memory_kind memory = memory_kind::discrete;
};

}  // namespace tf::backend
