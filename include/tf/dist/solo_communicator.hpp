#pragma once
/// solo_communicator: the one-rank communicator, so TP=1 code runs the same collectives with no
/// MPI (every collective is a copy or nothing).
#include <tf/dist/communicator.hpp>
#include <tf/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tf::dist {

class solo_communicator {
 public:
  static constexpr memory_space float_memory = memory_space::host;

  int rank() const { return 0; }
  int size() const { return 1; }

  void all_reduce_sum(std::span<float>) {}
  void all_gather(std::span<float const> mine, std::span<float> out) { copy(mine, out); }
  void all_gather(std::span<std::byte const> mine, std::span<std::byte> out) { copy(mine, out); }
  void broadcast(std::span<std::byte>, int root) { check_root(root); }
  void broadcast(std::vector<std::byte>&, int root) { check_root(root); }
  void barrier() {}
  std::int64_t all_reduce_min(std::int64_t v) { return v; }

 private:
  template <class T>
  static void copy(std::span<T const> mine, std::span<T> out) {
    if (out.size() != mine.size())
      throw tf::error("tf: all_gather on one rank: {} elements out for {} in (want equal)",
                      out.size(), mine.size());
    std::copy(mine.begin(), mine.end(), out.begin());
  }
  static void check_root(int root) {
    if (root != 0) throw tf::error("tf: broadcast from rank {} on a one-rank communicator", root);
  }
};

static_assert(communicator_check<solo_communicator>::ok);

}  // namespace tf::dist
