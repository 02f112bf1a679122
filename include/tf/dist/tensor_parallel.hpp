#pragma once
/// tf::dist::tensor_parallel: a process's place among the ranks a model is split over, as the
/// backend and the weight binder see it: rank, size and the one collective a forward needs (the
/// rank-order all-reduce after a row-parallel matmul). And the shard kind of each tensor role,
/// which decides what slice of a weight a rank reads (docs/tensor-parallel.md).
#include <tf/dist/communicator.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>

#include <functional>
#include <span>

namespace tf::dist {

/// What slice of a weight each rank holds.
enum class shard_kind : unsigned char {
  replicated,  // every rank holds all of it (norms, the embedding)
  column,      // a slice of the output features: y's columns split, no sum needed
  row,         // a slice of the input features: each rank's y is a partial sum, all-reduced
};

/// The shard kind of a role under tensor parallelism (Megatron's split: q/k/v, gate/up and the
/// scan's input projection by output features, o, down and the scan's output by input features).
constexpr shard_kind shard_of(model::tensor_role r) {
  using model::tensor_role;
  switch (r) {
    case tensor_role::attn_q:
    case tensor_role::attn_k:
    case tensor_role::attn_v:
    case tensor_role::attn_q_bias:
    case tensor_role::attn_k_bias:
    case tensor_role::attn_v_bias:
    case tensor_role::ffn_gate:
    case tensor_role::ffn_up:
    case tensor_role::ffn_gate_exps:
    case tensor_role::ffn_up_exps:
    case tensor_role::ffn_gate_shexp:
    case tensor_role::ffn_up_shexp:
      return shard_kind::column;
    case tensor_role::attn_output:
    case tensor_role::ffn_down:
    case tensor_role::ffn_down_exps:
    case tensor_role::ffn_down_shexp:
      return shard_kind::row;
    default:
      return shard_kind::replicated;
  }
}

/// Rank and size, and the all-reduce a row-parallel matmul ends with (empty at size 1).
struct tensor_parallel {
  int rank = 0;
  int size = 1;
  /// x[i] = the rank-order sum of every rank's x[i], the same bits on every rank.
  std::function<void(std::span<float>)> all_reduce_sum;
  /// all holds every rank's `mine` in rank order (a head split by vocabulary gathers its logits);
  /// empty: the head stays whole on every rank.
  std::function<void(std::span<float const> mine, std::span<float> all)> all_gather;
  /// Where the floats the collectives take live: a backend takes ranks whose floats are in its
  /// own memory (the CPU host memory, CUDA its device's).
  memory_space floats = memory_space::host;

  bool split() const { return size > 1; }

  /// The ranks of communicator `c` (which must outlive the result).
  template <communicator C>
  static tensor_parallel over(C& c) {
    return {c.rank(), c.size(), [&c](std::span<float> x) { c.all_reduce_sum(x); },
            [&c](std::span<float const> mine, std::span<float> all) { c.all_gather(mine, all); },
            C::float_memory};
  }
};

/// Throws unless `r` is a place among ranks that backend `name` can split over: a rank in range,
/// and when split, an all-reduce over floats in the backend's own memory (`own`, and `comm` names
/// the communicator that has them in the message).
inline void check_ranks_for(tensor_parallel const& r, char const* name, memory_space own,
                            char const* comm) {
  if (r.rank < 0 || r.rank >= r.size || (r.split() && !r.all_reduce_sum))
    throw error("tf: the {} backend got rank {} of {} ranks{}", name, r.rank, r.size,
                r.all_reduce_sum ? "" : " without an all-reduce");
  if (r.split() && r.floats != own)
    throw error("tf: the {} backend's ranks must reduce floats in {} memory ({}), not {}", name,
                own == memory_space::host ? "host" : "device", comm,
                own == memory_space::host ? "a device's" : "the host's");
}

/// `n` heads (or features) over `size` ranks: n / size each; `what` names them in the error.
inline int split_evenly(int n, int size, char const* family, char const* what) {
  if (size < 1 || n % size != 0)
    throw error(
        "tf: {} has {} {}, which do not split over {} ranks; use a rank count that "
        "divides {}",
        family, n, what, size, n);
  return n / size;
}

/// KV heads over `size` ranks: n / size each where that divides, one (replicated, as vLLM does)
/// where size is a multiple of n.
inline int split_kv_heads(int n, int size, char const* family) {
  if (size >= 1 && n % size == 0) return n / size;
  if (size >= 1 && size % n == 0) return 1;
  throw error(
      "tf: {} has {} KV heads, which neither split over {} ranks nor replicate across "
      "them; use a rank count that divides {} or a multiple of it",
      family, n, size, n);
}

}  // namespace tf::dist
