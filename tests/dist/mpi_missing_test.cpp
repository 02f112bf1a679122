// Configured without MPI (TF_MPI=AUTO found none): the communicator tests cannot run, and say so.
#include <catch2/catch.hpp>

#include "../common/cannot_run.hpp"

TEST_CASE("dist/mpi_missing: the MPI communicator tests need MPI", "[dist]") {
  tf::test::cannot_run(
      "MPI was not found at configure time, so the MPI communicator tests are not built "
      "(apt-get install libopenmpi-dev openmpi-bin, then configure again)");
}
