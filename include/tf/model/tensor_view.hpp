#pragma once
/// tensor_view: one tensor inside a mapped model file (name, type, dims, bytes), owning nothing.
#include <tf/model/tensor_type.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tf::model {

/// One tensor in a mapped file; dims[0] is the row length (GGUF ne[0]; HF shapes are reversed).
struct tensor_view {
  std::string name;
  tensor_type type{};
  std::vector<std::int64_t> dims;
  // Into the mapping, valid while the file object lives; GGUF data is aligned to general.alignment,
  // safetensors data only to 8 bytes at best, so read elements with memcpy or check alignment.
  const std::byte* data = nullptr;
  std::uint64_t bytes = 0;
  std::uint64_t offset = 0;  // byte offset of data from the start of its file

  /// Product of the dims (0 for a tensor with no dims).
  std::int64_t elements() const {
    if (dims.empty()) return 0;
    std::int64_t n = 1;
    for (auto d : dims) n *= d;
    return n;
  }
  /// Number of rows of dims[0] elements.
  std::int64_t rows() const { return dims.empty() || dims[0] == 0 ? 0 : elements() / dims[0]; }
};

}  // namespace tf::model
