#pragma once
/// AVX2 and AVX-512 (VNNI on 256-bit registers) dot products, compiled with per-function target
/// attributes so the binary still runs on CPUs without them; callers check cpu_features first.
#include <kernels/cpu/quant_blocks.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TF_KERNELS_X86 1

namespace tf::kernels::cpu {

#define TF_X86_NS avx2
#define TF_X86_TARGET "avx2,fma,f16c"
#define TF_X86_VNNI 0
#include <kernels/cpu/detail/vec_dot_x86.inc>
#undef TF_X86_NS
#undef TF_X86_TARGET
#undef TF_X86_VNNI

#define TF_X86_NS avx512
#define TF_X86_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define TF_X86_VNNI 1
#include <kernels/cpu/detail/vec_dot_x86.inc>
#undef TF_X86_NS
#undef TF_X86_TARGET
#undef TF_X86_VNNI

}  // namespace tf::kernels::cpu

#else
#define TF_KERNELS_X86 0
#endif
