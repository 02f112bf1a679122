#pragma once
/// Every launcher that kernels/cuda/launch.hpp declares, with its kernels. Exactly one translation
/// unit of a binary includes this file and is compiled with nvcc (apps/cuda_kernels.cu does it for
/// the apps and the CUDA tests); everything else includes launch.hpp.
#if !defined(__CUDACC__)
#error "kernels/cuda/launch.cuh defines CUDA kernels: compile this translation unit with nvcc"
#endif
#include <kernels/cuda/attention.cuh>
#include <kernels/cuda/convert.cuh>
#include <kernels/cuda/elementwise.cuh>
#include <kernels/cuda/matmul.cuh>
#include <kernels/cuda/norm.cuh>
#include <kernels/cuda/recurrent.cuh>
#include <kernels/cuda/rope.cuh>
#include <kernels/cuda/sample.cuh>
