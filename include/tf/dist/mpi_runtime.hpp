#pragma once
/// mpi_runtime: MPI for a process's lifetime (MPI_Init_thread, then MPI_Finalize), one per
/// process, made before any mpi_communicator. Needs tf::mpi (TF_MPI, cmake/tf_dist.cmake).
#include <tf/error.hpp>

#include <mpi.h>

#include <atomic>
#include <string>

namespace tf::dist {
namespace detail {

/// Set when a collective failed: MPI_Finalize would then wait for the dead peer forever.
inline std::atomic<bool> mpi_peer_failed{false};

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace detail

class mpi_runtime {
 public:
  /// Serialized threads: the engine thread calls MPI, one thread at a time, not always main.
  mpi_runtime(int* argc = nullptr, char*** argv = nullptr) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized)
      throw tf::error("tf: MPI is initialised already; make one mpi_runtime per process");
    int provided = 0;
    if (int const rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
        rc != MPI_SUCCESS)
      throw tf::error("tf: MPI_Init_thread failed: {}", detail::mpi_error_text(rc));
    if (provided < MPI_THREAD_SERIALIZED) {
      MPI_Finalize();
      throw tf::error("tf: this MPI gives thread level {}, tf needs MPI_THREAD_SERIALIZED ({})",
                      provided, static_cast<int>(MPI_THREAD_SERIALIZED));
    }
  }
  mpi_runtime(mpi_runtime const&) = delete;
  mpi_runtime& operator=(mpi_runtime const&) = delete;

  ~mpi_runtime() {
    // After a dead peer the process exits without MPI_Finalize; mpirun reports it.
    if (!detail::mpi_peer_failed.load()) MPI_Finalize();
  }

  /// True once a collective failed (the process should stop; MPI cannot be used again).
  static bool peer_failed() { return detail::mpi_peer_failed.load(); }
};

}  // namespace tf::dist
