#pragma once
/// nccl_communicator: the communicator of CUDA ranks. Its floats are device memory and move over
/// NCCL; its bytes (round plans, digests), barrier and min are host work and go over the
/// mpi_communicator it is built on, which also carries NCCL's unique id from rank 0. Needs
/// tf::nccl (TF_CUDA with NCCL and MPI, cmake/tf_dist.cmake).
///
/// The all-reduce is NCCL's all-gather, then one kernels::cuda::add per rank in rank order
/// (x = g_0, x += g_1, ...), never ncclAllReduce: NCCL's own sum order changes with the message
/// size and channel count, so a row's bits would depend on the rows beside it.
///
/// The NCCL communicator is nonblocking (ncclConfig_t::blocking = 0); every call waits for its
/// stream polling ncclCommGetAsyncError against mpi's deadline, then aborts the communicator
/// (ncclCommAbort: ncclCommDestroy would wait for the dead peer) and throws tf::error, naming the
/// ranks that no longer answer over MPI.
#include <tf/dist/communicator.hpp>
#include <tf/dist/mpi_communicator.hpp>
#include <tf/error.hpp>

#include <kernels/cuda/launch.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tf::dist {

class nccl_communicator {
 public:
  static constexpr memory_space float_memory = memory_space::device;

  /// Joins `host`'s ranks on CUDA device `device` (a collective: every rank of `host` calls it).
  nccl_communicator(mpi_communicator& host, int device) : host_(host), device_(device) {
    cuda(cudaSetDevice(device_), "cudaSetDevice");
    cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId id{};
    if (host_.rank() == 0) nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::span<std::byte> id_bytes(reinterpret_cast<std::byte*>(&id), sizeof id);
    host_.broadcast(id_bytes, 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t const started =
        ncclCommInitRankConfig(&comm_, host_.size(), id, host_.rank(), &config);
    if (started != ncclSuccess && started != ncclInProgress)
      fail(fmt::format("ncclCommInitRankConfig failed: {}", ncclGetErrorString(started)));
    settle("ncclCommInitRankConfig");
  }
  nccl_communicator(nccl_communicator const&) = delete;
  nccl_communicator& operator=(nccl_communicator const&) = delete;

  ~nccl_communicator() {
    if (comm_) {
      // Finalize flushes what is queued; a peer that never answers makes it an abort instead.
      bool flushed = ncclCommFinalize(comm_) != ncclSystemError;
      auto const deadline = std::chrono::steady_clock::now() + host_.timeout();
      ncclResult_t state = ncclInProgress;
      while (flushed && state == ncclInProgress) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclSystemError;
        if (std::chrono::steady_clock::now() > deadline) flushed = false;
        if (state == ncclInProgress) std::this_thread::yield();
      }
      if (flushed && state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const { return host_.rank(); }
  int size() const { return host_.size(); }
  int device() const { return device_; }
  /// The stream the float collectives run on (the caller orders its own work against it).
  cudaStream_t stream() const { return stream_; }

  /// x [n] in device memory.
  void all_reduce_sum(std::span<float> x) {
    guard();
    std::size_t const n = x.size();
    if (size() == 1 || n == 0) return;
    float* gathered = scratch(n * static_cast<std::size_t>(size()));
    enqueue(ncclAllGather(x.data(), gathered, n, ncclFloat32, comm_, stream_), "ncclAllGather");
    cuda(cudaMemcpyAsync(x.data(), gathered, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_),
         "cudaMemcpyAsync");
    for (int r = 1; r < size(); ++r)
      kernels::cuda::add(x.data(), gathered + static_cast<std::size_t>(r) * n,
                         static_cast<std::int64_t>(n), stream_);
    settle("all_reduce_sum");
  }

  /// mine [n] and out [size * n] in device memory.
  void all_gather(std::span<float const> mine, std::span<float> out) {
    guard();
    if (out.size() != mine.size() * static_cast<std::size_t>(size()))
      throw tf::error("tf: all_gather (device floats): {} elements out for {} in at {} ranks",
                      out.size(), mine.size(), size());
    enqueue(ncclAllGather(mine.data(), out.data(), mine.size(), ncclFloat32, comm_, stream_),
            "ncclAllGather");
    settle("all_gather");
  }

  void all_gather(std::span<std::byte const> mine, std::span<std::byte> out) {
    host_.all_gather(mine, out);
  }
  void broadcast(std::span<std::byte> data, int root) { host_.broadcast(data, root); }
  void broadcast(std::vector<std::byte>& data, int root) { host_.broadcast(data, root); }
  void barrier() { host_.barrier(); }
  std::int64_t all_reduce_min(std::int64_t v) { return host_.all_reduce_min(v); }

 private:
  void guard() const {
    if (!failed_.empty()) throw tf::error("{} (the communicator failed earlier)", failed_);
  }

  void cuda(cudaError_t e, char const* what) {
    if (e != cudaSuccess)
      fail(
          fmt::format("CUDA {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e)));
  }

  void nccl(ncclResult_t r, char const* what) {
    if (r != ncclSuccess) fail(fmt::format("{} failed: {}", what, ncclGetErrorString(r)));
  }

  // A nonblocking communicator may answer ncclInProgress to an enqueue; settle() waits it out.
  void enqueue(ncclResult_t r, char const* what) {
    if (r != ncclSuccess && r != ncclInProgress) nccl(r, what);
  }

  float* scratch(std::size_t floats) {
    if (floats > scratch_floats_) {
      if (scratch_) cuda(cudaFree(scratch_), "cudaFree");
      scratch_ = nullptr;
      cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), floats * sizeof(float)), "cudaMalloc");
      scratch_floats_ = floats;
    }
    return scratch_;
  }

  // Polls NCCL's state and the stream until both are done, an error, or mpi's deadline.
  void settle(char const* what) {
    auto const deadline = std::chrono::steady_clock::now() + host_.timeout();
    for (unsigned spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t const asked = ncclCommGetAsyncError(comm_, &state);
      if (asked != ncclSuccess) nccl(asked, "ncclCommGetAsyncError");
      if (state != ncclSuccess && state != ncclInProgress)
        fail(fmt::format("NCCL {} failed: {}", what, ncclGetErrorString(state)));
      if (state == ncclSuccess) {
        cudaError_t const q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) cuda(q, what);
      }
      if (std::chrono::steady_clock::now() > deadline) fail(timed_out(what));
      if (spins > 64) std::this_thread::yield();
    }
  }

  // Who stopped answering: a short MPI barrier names the ranks that are gone.
  std::string timed_out(char const* what) {
    std::string who_failed = "every rank answered a barrier over MPI: NCCL itself is stuck";
    auto const kept = host_.timeout();
    try {
      host_.set_timeout(std::chrono::seconds(2));
      host_.barrier();
    } catch (tf::error const& e) {
      who_failed = e.what();
    }
    host_.set_timeout(kept);
    return fmt::format("NCCL {} did not finish in {:.1f} s; {}", what, kept.count() / 1000.0,
                       who_failed);
  }

  [[noreturn]] void fail(std::string why) {
    failed_ = fmt::format("tf: rank {} (CUDA device {}): {}", host_.rank(), device_, why);
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    throw tf::error(failed_);
  }

  mpi_communicator& host_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  float* scratch_ = nullptr;
  std::size_t scratch_floats_ = 0;
  std::string failed_;
};

static_assert(communicator_check<nccl_communicator>::ok);

}  // namespace tf::dist
