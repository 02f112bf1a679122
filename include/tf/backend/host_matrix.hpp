#pragma once
/// A weight matrix in host memory as a model file holds it: `rows` rows of `cols` elements of
/// `type`, row-major, `row_bytes` apart. What a family's binder hands every backend's `upload`
/// (the CPU backend reads it in place, CUDA copies it to its device).
#include <tf/model/tensor_type.hpp>

#include <cstddef>
#include <cstdint>

namespace tf::backend {

struct host_matrix {
  model::tensor_type type{};
  std::int64_t rows = 0;  // output features
  std::int64_t cols = 0;  // input features (the row length)
  std::byte const* data = nullptr;
  std::uint64_t row_bytes = 0;
  /// A rank's share of the input features (a row-parallel weight): x w^T is a partial sum that the
  /// backend all-reduces over the ranks.
  bool partial_sum = false;

  bool empty() const { return rows == 0; }
};

}  // namespace tf::backend
