// The CUDA kernels of a binary: the one translation unit that compiles kernels/cuda/launch.cuh
// with nvcc (CMake's tf::cuda_kernels; a downstream project compiles this file or its own copy).
#include <kernels/cuda/launch.cuh>
