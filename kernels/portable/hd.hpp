#pragma once
/// TF_HD marks the kernels' per-element arithmetic as callable from host and device: nvcc
/// compiles it into the kernels, any C++ compiler into the host tests that check it on the CPU.
#if defined(__CUDACC__)
#define TF_HD __host__ __device__
#else
#define TF_HD
#endif
