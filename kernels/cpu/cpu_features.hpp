#pragma once
/// Which SIMD path the CPU kernels take: detected at run time, forced with TF_CPU_ISA.
#include <tf/error.hpp>

#include <cstdlib>
#include <string_view>

namespace tf::kernels::cpu {

/// Kernel code paths, each needing the features of the one before it.
enum class isa { portable = 0, avx2 = 1, avx512 = 2 };

/// Name of a path as TF_CPU_ISA spells it.
constexpr std::string_view isa_name(isa i) {
  return i == isa::avx512 ? "avx512" : i == isa::avx2 ? "avx2" : "portable";
}

/// The best path this CPU runs: avx2 needs AVX2+FMA+F16C; avx512 adds F, BW, VL and VNNI.
inline isa detected_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512vnni");
  return avx512 ? isa::avx512 : avx2 ? isa::avx2 : isa::portable;
#else
  return isa::portable;
#endif
}

/// Parses a TF_CPU_ISA value; throws for an unknown name or a path this CPU cannot run.
inline isa parse_isa(std::string_view s, isa best) {
  isa want;
  if (s == "portable")
    want = isa::portable;
  else if (s == "avx2")
    want = isa::avx2;
  else if (s == "avx512")
    want = isa::avx512;
  else
    throw tf::error("tf: TF_CPU_ISA={} is not one of portable, avx2, avx512", s);
  if (static_cast<int>(want) > static_cast<int>(best))
    throw tf::error("tf: TF_CPU_ISA={} asks for more than this CPU has (best: {})", s,
                    isa_name(best));
  return want;
}

/// The path kernels take by default: TF_CPU_ISA if set, else the detected best (read once).
inline isa default_isa() {
  static const isa chosen = [] {
    const isa best = detected_isa();
    const char* env = std::getenv("TF_CPU_ISA");
    return env && *env ? parse_isa(env, best) : best;
  }();
  return chosen;
}

/// Whether the default path has AVX2 (the row kernels' x86 code needs no more than that).
inline bool avx2_path() {
  static const bool yes = default_isa() != isa::portable;
  return yes;
}

/// Whether the default path has AVX-512 (F, BW, VL, VNNI).
inline bool avx512_path() {
  static const bool yes = default_isa() == isa::avx512;
  return yes;
}

}  // namespace tf::kernels::cpu
