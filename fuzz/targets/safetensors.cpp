// Fuzzes the safetensors header reader: the 8-byte length, the JSON header, dtypes, shapes and
// data_offsets. Contract: tf::error for any malformed file.
#include <tf/error.hpp>
#include <tf/model/safetensors.hpp>

#include <cstring>
#include <vector>

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size) std::memcpy(bytes.data(), data, size);
  auto const owned = tf::model::detail::mapped_bytes::own(std::move(bytes));
  std::vector<tf::model::tensor_view> tensors;
  try {
    tf::model::detail::parse_safetensors(owned, "fuzz.safetensors", tensors);
  } catch (tf::error const&) {
    return 0;
  }
  for (auto const& t : tensors) {
    tf_fuzz::check(t.offset + t.bytes <= owned.size(), "tensor bytes inside the file");
    if (t.bytes > 0) {
      volatile auto first = t.data[0];
      volatile auto last = t.data[t.bytes - 1];
      (void)first;
      (void)last;
    }
  }
  return 0;
}
