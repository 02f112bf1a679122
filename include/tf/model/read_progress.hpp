#pragma once
/// A process-wide count of model bytes read into memory so far (mapped_bytes::read adds each
/// chunk as it lands), so a start can show its progress without a callback through every reader.
#include <atomic>
#include <cstdint>

namespace tf::model {

/// Bytes read from model files into memory by this process; only ever grows.
inline std::atomic<std::uint64_t>& bytes_read() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

}  // namespace tf::model
