#pragma once
// For fuzz targets that reach kernels/ headers through tf/sample (the OpenAI request's sampling
// parameters): clang 14 does not know the "f16c" feature name kernels/cpu/cpu_features.hpp asks
// __builtin_cpu_supports about. The parsers never run a kernel, so the fuzz build answers "no".
#if defined(__clang__) && __clang_major__ < 16
#define __builtin_cpu_supports(feature) 0
#endif
