#pragma once
/// Which kernels backend::cuda runs its matmuls with; free of the CUDA headers so that
/// tf::open_options and the apps can name it in a build without CUDA.
#include <tf/error.hpp>

#include <string_view>

namespace tf::backend {

/// own: tf's warp-per-output kernel for every weight (kernels/cuda/matmul.cuh), the faster decode.
/// cublaslt: cuBLASLt for every weight and every batch size, one algorithm per weight shape
/// (include/tf/backend/cuda/blaslt.hpp), the faster prefill. Either way a row's bits do not
/// depend on its batch; the two modes give different bits.
enum class cuda_matmul : unsigned char { own, cublaslt };

inline constexpr std::string_view cuda_matmul_name(cuda_matmul m) {
  return m == cuda_matmul::cublaslt ? "cublaslt" : "own";
}

/// "own" or "cublaslt"; anything else throws naming the flag and the allowed values.
inline cuda_matmul parse_cuda_matmul(std::string_view s, std::string_view flag = "--cuda-matmul") {
  if (s == "own") return cuda_matmul::own;
  if (s == "cublaslt") return cuda_matmul::cublaslt;
  throw error("tf: {} wants own or cublaslt, got '{}'", flag, s);
}

}  // namespace tf::backend
