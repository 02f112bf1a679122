#pragma once
// What the tests of a model split over mpirun's ranks share: the ranks (made once MPI has
// started), whether every rank holds the same bits, and a main that starts MPI before Catch2 so
// that every rank runs every case. A test file defines CATCH_CONFIG_RUNNER before including this.
#include <tf/dist/mpi_communicator.hpp>
#include <tf/dist/mpi_runtime.hpp>

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

namespace tf::test::split {

inline dist::mpi_communicator*& the_ranks() {
  static dist::mpi_communicator* c = nullptr;  // set by run(), which outlives every case
  return c;
}

inline dist::mpi_communicator& ranks() {
  return *the_ranks();
}

/// Every rank's copy of `x` equals this rank's bit for bit.
inline bool equal_on_every_rank(std::span<float const> x) {
  auto& c = ranks();
  std::vector<float> all(x.size() * static_cast<std::size_t>(c.size()));
  c.all_gather(x, std::span<float>(all));
  for (int r = 0; r < c.size(); ++r)
    if (std::memcmp(x.data(), all.data() + static_cast<std::size_t>(r) * x.size(), x.size_bytes()))
      return false;
  return true;
}

/// The test binary's main: MPI, the ranks, then every Catch2 case.
inline int run(int argc, char** argv) {
  dist::mpi_runtime mpi(&argc, &argv);
  dist::mpi_communicator c;
  the_ranks() = &c;
  return Catch::Session().run(argc, argv);
}

}  // namespace tf::test::split
