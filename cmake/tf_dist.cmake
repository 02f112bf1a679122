# Tensor parallelism's transports, both optional: the header-only core (tf::tf) never needs them.
# tf::mpi is the MPI communicator for CPU ranks (include/tf/dist/mpi_communicator.hpp); tf::nccl
# is the NCCL one for CUDA ranks, its unique id exchanged over MPI.
set(TF_MPI "AUTO" CACHE STRING "Build the MPI communicator for tensor parallelism: AUTO, ON or OFF")
set_property(CACHE TF_MPI PROPERTY STRINGS AUTO ON OFF)
set(TF_HAS_MPI OFF)
if(NOT TF_MPI STREQUAL "OFF")
  # The C API only: MPI's C++ bindings are deprecated and Open MPI ships them as a second library.
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND AND MPIEXEC_EXECUTABLE)
    set(TF_HAS_MPI ON)
  elseif(TF_MPI STREQUAL "ON")
    message(FATAL_ERROR "TF_MPI=ON but MPI (headers, library and mpirun) was not found; on "
                        "Debian: apt-get install libopenmpi-dev openmpi-bin")
  endif()
endif()
message(STATUS "tf: MPI communicator ${TF_HAS_MPI} (TF_MPI=${TF_MPI})")

if(TF_HAS_MPI)
  add_library(tf_mpi INTERFACE)
  add_library(tf::mpi ALIAS tf_mpi)
  target_link_libraries(tf_mpi INTERFACE tf::tf MPI::MPI_CXX)
  target_compile_definitions(tf_mpi INTERFACE TF_WITH_MPI=1)
endif()

if(TF_HAS_NCCL AND TF_HAS_MPI)
  add_library(tf_nccl INTERFACE)
  add_library(tf::nccl ALIAS tf_nccl)
  target_include_directories(tf_nccl INTERFACE ${TF_NCCL_INCLUDE})
  target_link_libraries(tf_nccl INTERFACE tf::cuda tf::mpi ${TF_NCCL_LIBRARY})
  target_compile_definitions(tf_nccl INTERFACE TF_WITH_NCCL=1)
elseif(TF_HAS_NCCL AND TF_NCCL STREQUAL "ON")
  message(FATAL_ERROR "TF_NCCL=ON needs MPI too (the ranks exchange NCCL's unique id over it); "
                      "on Debian: apt-get install libopenmpi-dev openmpi-bin")
endif()

# The all-reduce bench (bench/allreduce.cpp): built with the tests so it keeps compiling.
if(TF_HAS_MPI AND TF_BUILD_TESTS)
  add_executable(bench_allreduce ${PROJECT_SOURCE_DIR}/bench/allreduce.cpp)
  target_link_libraries(bench_allreduce PRIVATE tf::mpi tf_project_options)
endif()
