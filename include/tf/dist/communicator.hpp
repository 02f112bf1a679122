#pragma once
/// tf::dist::communicator: what tensor parallelism asks of the ranks (rank, size, all-reduce sum,
/// all-gather, broadcast, barrier, all-reduce min), stated as a concept with one message per
/// missing piece. Implementations: solo_communicator (size 1, no MPI), mpi_communicator (CPU
/// ranks), nccl_communicator (CUDA ranks). Semantics every implementation keeps:
///
/// - Every rank calls the same collectives in the same order with the same sizes.
/// - `all_reduce_sum(x)` leaves x[i] = ((x_0[i] + x_1[i]) + x_2[i]) + ... on every rank: an
///   element's sum order depends on the rank ids only (never on the message size, the batch or
///   the transport), so every rank ends with the same bits and a row's bits do not depend on the
///   other rows of a round (docs/tensor-parallel.md).
/// - `all_gather(mine, out)`: out holds size() blocks of mine.size(), rank r's at r * mine.size().
/// - `broadcast(bytes, root)`: root's bytes on every rank (a vector is resized to root's size).
/// - A failed or timed-out collective throws tf::error naming the rank(s) that did not answer.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tf::dist {

/// Where a communicator's float collectives read and write (bytes are always host memory).
enum class memory_space : unsigned char { host, device };

template <class C>
concept has_rank_and_size = requires(C const& c) {
  { c.rank() } -> std::same_as<int>;
  { c.size() } -> std::same_as<int>;
};

template <class C>
concept collects_floats = requires(C& c, std::span<float> x, std::span<float const> mine) {
  c.all_reduce_sum(x);
  c.all_gather(mine, x);
};

template <class C>
concept moves_bytes = requires(C& c, std::span<std::byte const> mine, std::span<std::byte> out,
                               std::vector<std::byte>& grown, int root) {
  c.all_gather(mine, out);
  c.broadcast(out, root);
  c.broadcast(grown, root);
};

template <class C>
concept synchronizes = requires(C& c, std::int64_t v) {
  c.barrier();
  { c.all_reduce_min(v) } -> std::same_as<std::int64_t>;
};

template <class C>
concept states_float_memory = requires {
  { C::float_memory } -> std::convertible_to<memory_space>;
};

/// A communicator: every piece above.
template <class C>
concept communicator = has_rank_and_size<C> && collects_floats<C> && moves_bytes<C> &&
    synchronizes<C> && states_float_memory<C>;

/// A communicator whose floats are in host memory (what backend::cpu's all-reduce takes).
template <class C>
concept host_communicator = communicator<C> &&(C::float_memory == memory_space::host);

/// Instantiate where a type is taken as a communicator: one message per missing piece.
template <class C>
struct communicator_check {
  static_assert(has_rank_and_size<C>,
                "tf: this communicator lacks `int rank() const` and `int size() const`; add both "
                "(rank in [0, size)).");
  static_assert(collects_floats<C>,
                "tf: this communicator lacks `all_reduce_sum(std::span<float>)` or "
                "`all_gather(std::span<float const>, std::span<float>)`; add them, summing in rank "
                "order (include/tf/dist/rank_order_sum.hpp).");
  static_assert(moves_bytes<C>,
                "tf: this communicator lacks `all_gather(std::span<std::byte const>, "
                "std::span<std::byte>)`, `broadcast(std::span<std::byte>, int root)` or "
                "`broadcast(std::vector<std::byte>&, int root)`; add them.");
  static_assert(synchronizes<C>,
                "tf: this communicator lacks `barrier()` or `std::int64_t "
                "all_reduce_min(std::int64_t)`; add them.");
  static_assert(
      states_float_memory<C>,
      "tf: this communicator does not say where its floats live; add `static constexpr "
      "tf::dist::memory_space float_memory = tf::dist::memory_space::host;` (or device).");
  static constexpr bool ok = true;
};

}  // namespace tf::dist
