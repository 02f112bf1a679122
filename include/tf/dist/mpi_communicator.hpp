#pragma once
/// mpi_communicator: the communicator of CPU ranks over MPI, on one machine (shared memory) or
/// many (TCP). Every collective is nonblocking point-to-point messages to and from each peer,
/// polled against a deadline (mpi_options::timeout, 8 s by default, so an error comes within
/// 10 s): a peer that died or stopped answering is a tf::error naming it (rank and host), never a
/// hang. MPI's own failures come back
/// through MPI_ERRORS_RETURN, set on the communicator's own duplicate of MPI_COMM_WORLD, and are
/// thrown as tf::error naming this rank, the peer and the collective. After an error the
/// communicator is spent: every later call throws the first error again.
///
/// The all-reduce is an all-gather followed by rank_order_sum, so every rank forms the same bits
/// in an order that depends on the rank ids only (docs/tensor-parallel.md).
#include <tf/dist/communicator.hpp>
#include <tf/dist/mpi_runtime.hpp>
#include <tf/dist/rank_order_sum.hpp>
#include <tf/error.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tf::dist {

struct mpi_options {
  /// A collective that waits longer than this for a peer throws naming the peer.
  std::chrono::milliseconds timeout{8000};
};

class mpi_communicator {
 public:
  static constexpr memory_space float_memory = memory_space::host;

  /// Joins every rank of `parent` (a collective: all ranks construct it together).
  explicit mpi_communicator(mpi_options options = {}, MPI_Comm parent = MPI_COMM_WORLD)
      : timeout_(options.timeout) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      throw tf::error("tf: mpi_communicator needs MPI started: make a tf::dist::mpi_runtime first");
    if (int const rc = MPI_Comm_dup(parent, &comm_); rc != MPI_SUCCESS)
      throw tf::error("tf: MPI_Comm_dup failed: {}", detail::mpi_error_text(rc));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    gather_hosts();
  }
  mpi_communicator(mpi_communicator const&) = delete;
  mpi_communicator& operator=(mpi_communicator const&) = delete;

  ~mpi_communicator() {
    if (failed_.empty()) MPI_Comm_free(&comm_);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The host a rank runs on (MPI_Get_processor_name), for messages.
  std::string const& host(int rank) const { return hosts_.at(static_cast<std::size_t>(rank)); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// E.g. longer around a weights' load whose length differs between ranks.
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  /// The first error, or empty while the communicator works.
  std::string const& failure() const { return failed_; }

  void all_reduce_sum(std::span<float> x) {
    sum_scratch_.resize(x.size() * static_cast<std::size_t>(size_));
    gather(x.data(), x.size_bytes(), reinterpret_cast<std::byte*>(sum_scratch_.data()),
           "all_reduce_sum");
    rank_order_sum(sum_scratch_, size_, x);
  }

  void all_gather(std::span<float const> mine, std::span<float> out) {
    check_gather_size(mine.size(), out.size(), "all_gather (floats)");
    gather(mine.data(), mine.size_bytes(), reinterpret_cast<std::byte*>(out.data()),
           "all_gather (floats)");
  }

  void all_gather(std::span<std::byte const> mine, std::span<std::byte> out) {
    check_gather_size(mine.size(), out.size(), "all_gather (bytes)");
    gather(mine.data(), mine.size(), out.data(), "all_gather (bytes)");
  }

  /// Root's bytes into every rank's `data`; every rank passes the same size.
  void broadcast(std::span<std::byte> data, int root) {
    check_root(root);
    int const tag = next_tag(kind::broadcast);
    int const count = count_of(data.size(), "broadcast");
    if (size_ == 1) return;
    open_.clear();
    if (rank_ == root) {
      send_to_all(data.data(), count, tag, "broadcast");
    } else {
      post_receive(data.data(), count, root, tag, "broadcast");
    }
    wait("broadcast", data.size());
  }

  /// Root's bytes into every rank's `data`, resized to root's size.
  void broadcast(std::vector<std::byte>& data, int root) {
    check_root(root);
    int const tag = next_tag(kind::broadcast);
    if (size_ == 1) return;
    open_.clear();
    if (rank_ == root) {
      send_to_all(data.data(), count_of(data.size(), "broadcast"), tag, "broadcast");
      wait("broadcast", data.size());
      return;
    }
    // The size is root's: probe its message, then receive exactly that one.
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status{};
    auto const start = std::chrono::steady_clock::now();
    auto const deadline = start + timeout_;
    for (;;) {
      int found = 0;
      if (int const rc = MPI_Improbe(root, tag, comm_, &found, &message, &status);
          rc != MPI_SUCCESS)
        fail(fmt::format("tf: {}: MPI broadcast from {} failed: {}", who(rank_), who(root),
                         detail::mpi_error_text(rc)));
      if (found) break;
      if (std::chrono::steady_clock::now() > deadline)
        fail(
            fmt::format("tf: {}: broadcast got nothing from {} in {:.1f} s ({} died or stopped "
                        "answering)",
                        who(rank_), who(root), seconds(timeout_), who(root)));
      if (std::chrono::steady_clock::now() - start > spin_before_yield) std::this_thread::yield();
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    data.resize(static_cast<std::size_t>(count));
    open_.push_back({MPI_REQUEST_NULL, root, true});
    if (int const rc = MPI_Imrecv(data.data(), count, MPI_BYTE, &message, &open_.back().request);
        rc != MPI_SUCCESS)
      fail(fmt::format("tf: {}: MPI broadcast from {} failed: {}", who(rank_), who(root),
                       detail::mpi_error_text(rc)));
    wait("broadcast", data.size());
  }

  void barrier() {
    std::byte const mine{1};
    gather_scratch_.resize(static_cast<std::size_t>(size_));
    gather(&mine, 1, gather_scratch_.data(), "barrier");
  }

  std::int64_t all_reduce_min(std::int64_t v) {
    std::vector<std::int64_t> all(static_cast<std::size_t>(size_));
    gather(&v, sizeof v, reinterpret_cast<std::byte*>(all.data()), "all_reduce_min");
    return *std::min_element(all.begin(), all.end());
  }

 private:
  enum class kind : int { gather = 1, broadcast = 2 };
  // How long a wait spins before it yields the core between polls (ranks may share cores).
  static constexpr std::chrono::microseconds spin_before_yield{1000};

  struct pending {
    MPI_Request request = MPI_REQUEST_NULL;
    int peer = 0;
    bool receive = false;
  };

  static bool truncated(int rc) {
    int error_class = 0;
    MPI_Error_class(rc, &error_class);
    return error_class == MPI_ERR_TRUNCATE;
  }

  static double seconds(std::chrono::milliseconds t) { return t.count() / 1000.0; }

  std::string who(int rank) const {
    if (hosts_.empty()) return fmt::format("rank {}", rank);
    return fmt::format("rank {} on {}", rank, hosts_[static_cast<std::size_t>(rank)]);
  }

  // The call's sequence number in the tag: ranks that disagree on the order of collectives time
  // out naming each other instead of pairing wrong messages. 4 * 8192 stays under MPI's least
  // tag bound (32767).
  int next_tag(kind k) {
    guard();
    return static_cast<int>(k) + 4 * static_cast<int>(sequence_++ % 8192);
  }

  void guard() const {
    if (!failed_.empty()) throw tf::error("{} (the communicator failed earlier)", failed_);
  }

  void check_root(int root) const {
    if (root < 0 || root >= size_)
      throw tf::error("tf: broadcast from rank {}, but the ranks are 0 to {}", root, size_ - 1);
  }

  void check_gather_size(std::size_t mine, std::size_t out, char const* what) const {
    if (out != mine * static_cast<std::size_t>(size_))
      throw tf::error("tf: {}: {} elements out for {} in at {} ranks (want in * ranks)", what, out,
                      mine, size_);
  }

  int count_of(std::size_t bytes, char const* what) const {
    if (bytes > static_cast<std::size_t>(INT_MAX))
      throw tf::error("tf: {} of {} bytes passes MPI's int count; split it", what, bytes);
    return static_cast<int>(bytes);
  }

  void post_receive(void* into, int count, int peer, int tag, char const* what) {
    open_.push_back({MPI_REQUEST_NULL, peer, true});
    if (int const rc = MPI_Irecv(into, count, MPI_BYTE, peer, tag, comm_, &open_.back().request);
        rc != MPI_SUCCESS)
      fail(fmt::format("tf: {}: MPI {} from {} failed: {}", who(rank_), what, who(peer),
                       detail::mpi_error_text(rc)));
  }

  void send_to_all(void const* from, int count, int tag, char const* what) {
    // Peers in ring order from this rank, so no peer gets every rank's first message.
    for (int k = 1; k < size_; ++k) {
      int const peer = (rank_ + k) % size_;
      open_.push_back({MPI_REQUEST_NULL, peer, false});
      if (int const rc = MPI_Isend(from, count, MPI_BYTE, peer, tag, comm_, &open_.back().request);
          rc != MPI_SUCCESS)
        fail(fmt::format("tf: {}: MPI {} to {} failed: {}", who(rank_), what, who(peer),
                         detail::mpi_error_text(rc)));
    }
  }

  // out [size, bytes]: rank r's `bytes` at r * bytes.
  void gather(void const* mine, std::size_t bytes, std::byte* out, char const* what) {
    int const tag = next_tag(kind::gather);
    int const count = count_of(bytes, what);
    std::byte* const own = out + static_cast<std::size_t>(rank_) * bytes;
    if (size_ > 1) {
      open_.clear();
      open_.reserve(2 * static_cast<std::size_t>(size_));
      for (int k = 1; k < size_; ++k) {
        int const peer = (rank_ - k + size_) % size_;
        post_receive(out + static_cast<std::size_t>(peer) * bytes, count, peer, tag, what);
      }
      // Sent from the caller's buffer: the own block's copy then overlaps the transfers.
      send_to_all(mine, count, tag, what);
    }
    if (bytes && own != mine) std::memmove(own, mine, bytes);
    if (size_ > 1) wait(what, bytes);
  }

  // Polls the open requests (one MPI_Testall, one progress pass) until all complete, an MPI
  // error, or the deadline; then checks each receive's size.
  void wait(char const* what, std::size_t expected) {
    auto const start = std::chrono::steady_clock::now();
    auto const deadline = start + timeout_;
    requests_.resize(open_.size());
    statuses_.resize(open_.size());
    for (std::size_t i = 0; i < open_.size(); ++i) requests_[i] = open_[i].request;
    for (;;) {
      int done = 0;
      int const rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                                 statuses_.data());
      // Testall frees what completed: fail() must see only the handles still open.
      for (std::size_t i = 0; i < open_.size(); ++i) open_[i].request = requests_[i];
      if (rc == MPI_ERR_IN_STATUS) failed_in_status(what);
      if (rc != MPI_SUCCESS)
        fail(
            fmt::format("tf: {}: MPI {} failed: {}", who(rank_), what, detail::mpi_error_text(rc)));
      if (done) break;
      auto const now = std::chrono::steady_clock::now();
      if (now > deadline) {
        settle_each(what);  // the ones still open are the silent peers
        fail(timed_out(what));
      }
      if (now - start > spin_before_yield) std::this_thread::yield();
    }
    for (std::size_t i = 0; i < open_.size(); ++i) {
      pending const& p = open_[i];
      if (!p.receive) continue;
      int got = 0;
      MPI_Get_count(&statuses_[i], MPI_BYTE, &got);
      if (static_cast<std::size_t>(got) != expected)
        fail(fmt::format("tf: {}: {} sent {} bytes to {}, this rank expected {} (the ranks "
                         "called it with different sizes)",
                         who(rank_), who(p.peer), got, what, expected),
             true);
    }
  }

  // MPI_Testall said some request failed: name its peer from its status.
  void failed_in_status(char const* what) {
    for (std::size_t i = 0; i < open_.size(); ++i) {
      int const e = statuses_[i].MPI_ERROR;
      if (e == MPI_SUCCESS || e == MPI_ERR_PENDING) continue;
      pending const& p = open_[i];
      fail(fmt::format("tf: {}: MPI {} {} {} failed: {}{}", who(rank_), what,
                       p.receive ? "from" : "to", who(p.peer), detail::mpi_error_text(e),
                       p.receive ? " (did the ranks pass different sizes?)" : ""),
           truncated(e));
    }
  }

  // MPI_Test on each request still open: names the peer of one that failed, and leaves the
  // open ones open (their status is kept for the size check).
  void settle_each(char const* what) {
    for (std::size_t i = 0; i < open_.size(); ++i) {
      pending& p = open_[i];
      if (p.request == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Status status{};
      if (int const rc = MPI_Test(&p.request, &done, &status); rc != MPI_SUCCESS)
        fail(fmt::format("tf: {}: MPI {} {} {} failed: {}{}", who(rank_), what,
                         p.receive ? "from" : "to", who(p.peer), detail::mpi_error_text(rc),
                         p.receive ? " (did the ranks pass different sizes?)" : ""),
             truncated(rc));
      if (done) statuses_[i] = status;
    }
  }

  std::string timed_out(char const* what) const {
    std::string silent;
    for (pending const& p : open_)
      if (p.receive && p.request != MPI_REQUEST_NULL)
        silent += fmt::format("{}{}", silent.empty() ? "" : ", ", who(p.peer));
    if (!silent.empty())
      return fmt::format("tf: {}: {} got nothing from {} in {:.1f} s (died or stopped answering)",
                         who(rank_), what, silent, seconds(timeout_));
    for (pending const& p : open_)
      if (p.request != MPI_REQUEST_NULL)
        silent += fmt::format("{}{}", silent.empty() ? "" : ", ", who(p.peer));
    return fmt::format("tf: {}: {} could not deliver to {} in {:.1f} s (died or stopped answering)",
                       who(rank_), what, silent, seconds(timeout_));
  }

  // Spends the communicator: open receives are cancelled (their buffers may go), then throws.
  // A size mismatch leaves every peer alive (MPI_Finalize still works); any other failure may not.
  [[noreturn]] void fail(std::string message, bool peers_alive = false) {
    failed_ = message;
    if (!peers_alive) detail::mpi_peer_failed.store(true);
    for (pending& p : open_) {
      if (p.request == MPI_REQUEST_NULL) continue;
      if (p.receive) MPI_Cancel(&p.request);
      MPI_Request_free(&p.request);
    }
    open_.clear();
    throw tf::error(std::move(message));
  }

  // Every rank's host name, for the messages that name a peer.
  void gather_hosts() {
    constexpr std::size_t width = MPI_MAX_PROCESSOR_NAME;
    std::vector<char> mine(width, '\0');
    int length = 0;
    MPI_Get_processor_name(mine.data(), &length);
    std::vector<char> all(width * static_cast<std::size_t>(size_));
    gather(mine.data(), width, reinterpret_cast<std::byte*>(all.data()), "start-up");
    for (int r = 0; r < size_; ++r)
      hosts_.emplace_back(all.data() + static_cast<std::size_t>(r) * width,
                          strnlen(all.data() + static_cast<std::size_t>(r) * width, width));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
  unsigned sequence_ = 0;
  std::string failed_;
  std::vector<std::string> hosts_;
  std::vector<pending> open_;
  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;
  std::vector<float> sum_scratch_;
  std::vector<std::byte> gather_scratch_;
};

static_assert(communicator_check<mpi_communicator>::ok);

}  // namespace tf::dist
