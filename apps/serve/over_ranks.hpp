#pragma once
// serve --tp N under mpirun: the ranks' communicators, rank 0's budget over the ranks, and what a
// rank > 0 runs instead of the HTTP server (include/tf/serve/open_over_ranks.hpp).
#include <tf/dist/mpi_communicator.hpp>
#if defined(TF_WITH_NCCL)
#include <tf/dist/nccl_communicator.hpp>
#endif
#include <tf/dist/mpi_runtime.hpp>
#include <tf/dist/rank_start.hpp>
#include <tf/error.hpp>
#include <tf/memory/budget.hpp>
#include <tf/model/model_file.hpp>
#include <tf/serve/open_over_ranks.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <unistd.h>

namespace tf::serve::tp {

/// MPI and the communicators of the ranks a --tp start runs on (alive until main returns): `comm`
/// carries the start and rank 0's rounds; CUDA ranks add NCCL's for the backend's floats.
struct ranks {
  dist::mpi_runtime mpi;
  dist::mpi_communicator comm;
#if defined(TF_WITH_NCCL)
  std::optional<dist::nccl_communicator> devices;
#endif

  ranks(int tp, int* argc, char*** argv) : mpi(argc, argv), comm() {
    if (comm.size() != tp)
      throw error(
          "tf: --tp {} but mpirun started {} rank{}: launch with `mpirun -n {} serve ... --tp {}`",
          tp, comm.size(), comm.size() == 1 ? "" : "s", tp, tp);
    MPI_Comm shared = MPI_COMM_NULL;  // the ranks on this machine
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL,
                            &shared) == MPI_SUCCESS) {
      MPI_Comm_rank(shared, &local_rank_);
      MPI_Comm_free(&shared);
    }
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    fmt::print(stderr, "tf: rank {} of {} on {}, pid {}\n", comm.rank(), comm.size(), host,
               static_cast<long>(::getpid()));
  }

  /// This rank's place among the ranks on its machine (0 first): the device it takes.
  int local_rank() const {
    return local_rank_;
  }

 private:
  int local_rank_ = 0;
};

/// Where a rank's pool lives: host memory, or a device's (read by `device`).
struct rank_memory {
  memory::memory_kind kind = memory::memory_kind::host;
  memory::device_reader device;
};

/// This rank's room as it reports it: the reading with `held` added back, the bytes of its
/// weights already in that memory when it reads (counted in `model_bytes` beside the rest).
inline memory::pool_reading room_before_weights(std::uint64_t held, rank_memory const& where) {
  auto r = memory::read_pool(where.kind, memory::system_proc_reader(), where.device,
                             memory::system_page_size());
  r.pool_bytes = std::min(r.total_bytes, r.pool_bytes + held);
  return r;
}

/// Rank 0's budget: its reading with the environment's reserve and cap applied, sized from the
/// rank with the least room after its own weights (`o.model_bytes` is rank 0's, `held` of them
/// already in memory).
inline memory::budget budget_over_ranks(dist::mpi_communicator& comm, memory::budget_options o,
                                        std::uint64_t held, rank_memory const& where) {
  memory::apply_env(o, memory::system_env_reader());
  return dist::budget_over_ranks(comm, room_before_weights(held, where), o);
}

/// "tf: rank R holds X MiB of weights, its share of the file's Y MiB (N of M bytes)".
inline std::string weights_line(int rank, model_costs const& c, std::filesystem::path const& path) {
  auto const mine = c.weight_bytes.value_or(0), file = model::file_bytes(path);
  auto mib = [](std::uint64_t b) { return static_cast<double>(b) / (1 << 20); };
  return fmt::format(
      "tf: rank {} holds {:.1f} MiB of weights, its share of the file's {:.1f} MiB "
      "({} of {} bytes)",
      rank, mib(mine), mib(file), mine, file);
}

/// A rank > 0's whole run on backend B (its floats reduced over `data`): the same model, its room
/// reported to rank 0 (its weights and `scratch_bytes` beside them), its shard loaded, rank 0's
/// calls replayed until it stops; its census printed beside rank 0's. The exit code: 0 when the
/// censuses balance and agree.
template <class B, class D>
int follow(dist::mpi_communicator& comm, D& data, std::filesystem::path const& path,
           open_options const& o, std::optional<std::uint64_t> reserve_bytes,
           std::optional<std::uint64_t> cap_bytes, rank_memory const& where,
           std::uint64_t scratch_bytes) {
  // Rank 0 decides when to stop (mpirun hands a Ctrl-C or SIGTERM to every rank): this rank
  // stops when rank 0 says so, or when rank 0 is gone.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  auto room = [&](model_costs const& c) {
    memory::budget_options b;
    b.reserve_bytes = reserve_bytes;
    b.cap_bytes = cap_bytes;
    b.model_bytes = c.weight_bytes.value_or(0) + scratch_bytes;
    memory::apply_env(b, memory::system_env_reader());
    fmt::print(stderr, "{}\n", weights_line(comm.rank(), c, path));
    dist::report_room(comm, room_before_weights(c.weight_bytes_held, where), b);
  };
  auto const all =
      follow_over_ranks<families::builtin, B>(comm, data, path, o, room, rank_deadlines{});
  auto const& mine = all.at(static_cast<std::size_t>(comm.rank()));
  fmt::print(stderr, "tf: rank {}: KV census at stop: {}\n", comm.rank(), mine.line());
  if (!mine.balanced() || !(mine == all.at(0))) {
    fmt::print(stderr, "tf: error: rank {}'s KV census at stop differs from rank 0's ({})\n",
               comm.rank(), all.at(0).line());
    return 2;
  }
  return 0;
}

/// Rank 0 after its own census: each other rank's, which must equal it.
inline bool censuses_agree(std::vector<kv::census> const& all) {
  bool same = true;
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) {
      fmt::print(stderr, "tf: rank {}'s KV census at stop equals rank 0's\n", r);
    } else {
      fmt::print(stderr, "tf: error: rank {}'s KV census at stop differs: {}\n", r, all[r].line());
      same = false;
    }
  }
  return same;
}

}  // namespace tf::serve::tp
