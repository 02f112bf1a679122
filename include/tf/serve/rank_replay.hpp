#pragma once
/// Serving a model split over ranks: rank 0 runs HTTP, the lane host and the ledger; every call
/// its lane host makes on the model (a forward's rows, a page or state copy) is broadcast as a
/// small message before rank 0 runs it, and the other ranks run the same call on their shard, so
/// the collectives inside the forward pair up. Rank 0's admission decisions ride along and the
/// other ranks replay them on a mirror of the pool, so every rank ends with the same census.
/// Sampling happens on rank 0 only (docs/tensor-parallel.md, "Serving over ranks").
#include <tf/batch.hpp>
#include <tf/dist/communicator.hpp>
#include <tf/error.hpp>
#include <tf/kv/units.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/serve/batched_model.hpp>
#include <tf/serve/lane_admission.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace tf::serve {

/// What one message from rank 0 asks the other ranks to do after replaying its decisions.
enum class replay_op : std::uint8_t {
  idle,        // a barrier only: every rank learns the others are alive while the server idles
  forward,     // run these rows (rank 0 samples; the others drop their logits)
  copy_page,   // page `to` takes page `from`
  copy_state,  // state slot `to` takes slot `from`
  stop,        // the server stopped: compare censuses and end
};

namespace detail {

/// Little-endian-agnostic byte packing (every rank runs the same binary on the same ABI).
class replay_writer {
 public:
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>, "replay messages carry plain values only");
    auto const at = bytes_.size();
    bytes_.resize(at + sizeof v);
    std::memcpy(bytes_.data() + at, &v, sizeof v);
  }
  void put_ints(std::span<std::int32_t const> v) {
    put(static_cast<std::uint32_t>(v.size()));
    auto const at = bytes_.size();
    bytes_.resize(at + v.size_bytes());
    if (!v.empty()) std::memcpy(bytes_.data() + at, v.data(), v.size_bytes());
  }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  std::vector<std::byte> bytes_;
};

class replay_reader {
 public:
  explicit replay_reader(std::span<std::byte const> b) : b_(b) {}
  template <class T>
  T get() {
    T v{};
    need(sizeof v);
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::vector<std::int32_t> get_ints() {
    auto const n = get<std::uint32_t>();
    need(std::size_t{n} * sizeof(std::int32_t));
    std::vector<std::int32_t> v(n);
    if (n > 0) std::memcpy(v.data(), b_.data() + at_, n * sizeof(std::int32_t));
    at_ += n * sizeof(std::int32_t);
    return v;
  }

 private:
  void need(std::size_t n) const {
    if (at_ + n > b_.size())
      throw error("tf: a replay message from rank 0 ends early ({} bytes, {} read, {} more asked)",
                  b_.size(), at_, n);
  }
  std::span<std::byte const> b_;
  std::size_t at_ = 0;
};

inline void put_decisions(replay_writer& w, std::span<decision const> ds) {
  w.put(static_cast<std::uint32_t>(ds.size()));
  for (auto const& d : ds) {
    w.put(static_cast<std::uint8_t>(d.kind));
    w.put(d.id);
    w.put(d.count);
    w.put(static_cast<std::uint8_t>(d.keep));
    w.put_ints(d.prompt);
  }
}

inline std::vector<decision> get_decisions(replay_reader& r) {
  std::vector<decision> ds(r.get<std::uint32_t>());
  for (auto& d : ds) {
    d.kind = static_cast<decision_kind>(r.get<std::uint8_t>());
    d.id = r.get<std::uint64_t>();
    d.count = r.get<std::int64_t>();
    d.keep = r.get<std::uint8_t>() != 0;
    d.prompt = r.get_ints();
  }
  return ds;
}

}  // namespace detail

/// A model whose forward can also write every token's final hidden state.
template <class M>
concept gives_hidden_states = requires(M& m, M const& cm, std::span<batch_row const> rows,
                                       float* p) {
  m.forward(rows, p, p);
  cm.hidden_size();
};

/// Every rank's census (index = rank), this rank's given as `mine`.
template <dist::host_communicator C>
std::vector<kv::census> gather_census(C& comm, kv::census mine) {
  std::vector<kv::census> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)));
  return all;
}

/// What rank 0's main loop asks of the link to the other ranks, whatever the model type.
class rank_link {
 public:
  virtual ~rank_link() = default;
  /// Whether a call to the other ranks failed (a rank died or stopped answering).
  virtual bool failed() const = 0;
  /// The first failure's message (names the rank), or "".
  virtual std::string failure() const = 0;
  /// After the lane host stopped: tells the other ranks to stop and returns every rank's census
  /// (index = rank; rank 0's is `mine`, its ledger's). Throws tf::error when a rank does not
  /// answer.
  virtual std::vector<kv::census> finish(kv::census mine) = 0;
};

/// Rank 0's model: `M` (this rank's shard) behind the batched-model calls the lane host makes,
/// each broadcast to the other ranks before it runs here. A heartbeat thread sends `idle` when
/// nothing was sent for `beat`, so the other ranks, waiting with the communicator's deadline,
/// tell a quiet server from a dead one.
template <batched_model M, dist::host_communicator C>
class rank_leader final : public rank_link {
 public:
  using clock = std::chrono::steady_clock;

  rank_leader(std::unique_ptr<M> model, C& comm, std::chrono::milliseconds beat)
      : model_(std::move(model)), comm_(comm), beat_(beat) {
    if (comm_.rank() != 0) throw error("tf: rank {} cannot lead; rank 0 serves", comm_.rank());
    last_sent_ = clock::now();
    heart_ = std::thread([this] { heartbeat(); });
  }
  rank_leader(rank_leader const&) = delete;
  rank_leader& operator=(rank_leader const&) = delete;
  ~rank_leader() override { stop_heart(); }

  M& model() { return *model_; }
  auto vocab_size() const { return model_->vocab_size(); }
  auto page_tokens() const { return model_->page_tokens(); }
  auto num_pages() const { return model_->num_pages(); }
  auto num_state_slots() const requires stateful_model<M> { return model_->num_state_slots(); }
  auto state_bytes() const requires stateful_model<M> { return model_->state_bytes(); }

  void forward(std::span<batch_row const> rows, float* logits) {
    run(replay_op::forward, rows, 0, 0, [&] { model_->forward(rows, logits); });
  }
  void forward_sample(std::span<batch_row const> rows, std::span<sample::sampler* const> samplers,
                      std::span<std::span<std::int32_t const> const> histories,
                      std::span<sample::sample_result> out) requires sampling_model<M> {
    run(replay_op::forward, rows, 0, 0,
        [&] { model_->forward_sample(rows, samplers, histories, out); });
  }
  /// The forward that also gives every token's final hidden state (for drafts that read them,
  /// an MTP head), where `M` has it; the other ranks run the plain forward.
  void forward(std::span<batch_row const> rows, float* logits,
               float* hidden) requires gives_hidden_states<M> {
    run(replay_op::forward, rows, 0, 0, [&] { model_->forward(rows, logits, hidden); });
  }
  auto hidden_size() const requires gives_hidden_states<M> { return model_->hidden_size(); }
  void copy_page(std::int32_t from, std::int32_t to) {
    run(replay_op::copy_page, {}, from, to, [&] { model_->copy_page(from, to); });
  }
  void copy_state(std::int32_t from, std::int32_t to) requires stateful_model<M> {
    run(replay_op::copy_state, {}, from, to, [&] { model_->copy_state(from, to); });
  }

  /// The lane host's decision sink (host_config::decisions): sent with the next message.
  void take(std::vector<decision> ds) {
    std::lock_guard lock(pending_mutex_);
    for (auto& d : ds) pending_.push_back(std::move(d));
  }

  bool failed() const override { return failed_.load(); }
  std::string failure() const override {
    std::lock_guard lock(call_mutex_);
    return failure_;
  }

  std::vector<kv::census> finish(kv::census mine) override {
    stop_heart();
    std::lock_guard lock(call_mutex_);
    if (failed_) throw error("{}", failure_);
    send(replay_op::stop, {}, 0, 0);
    return gather_census(comm_, mine);
  }

 private:
  // Sends the call, then runs it here; a failure marks the link failed and is rethrown, so the
  // lane host ends the running requests with it.
  template <class Fn>
  void run(replay_op op, std::span<batch_row const> rows, std::int32_t from, std::int32_t to,
           Fn&& local) {
    std::lock_guard lock(call_mutex_);
    if (failed_) throw error("{}", failure_);
    try {
      send(op, rows, from, to);
      local();
    } catch (std::exception const& e) {
      failure_ = e.what();
      failed_ = true;
      throw;
    }
  }

  // Under call_mutex_.
  void send(replay_op op, std::span<batch_row const> rows, std::int32_t from, std::int32_t to) {
    detail::replay_writer w;
    w.put(static_cast<std::uint8_t>(op));
    {
      std::lock_guard lock(pending_mutex_);
      detail::put_decisions(w, pending_);
      pending_.clear();
    }
    if (op == replay_op::forward) {
      w.put(static_cast<std::uint32_t>(rows.size()));
      for (auto const& r : rows) {
        w.put(r.start_pos);
        w.put(r.state_slot);
        w.put(static_cast<std::uint8_t>(r.all_logits));
        w.put_ints(r.tokens);
        w.put_ints(r.page_table);
      }
    } else if (op == replay_op::copy_page || op == replay_op::copy_state) {
      w.put(from);
      w.put(to);
    }
    comm_.broadcast(w.bytes(), 0);
    last_sent_ = clock::now();
  }

  void heartbeat() {
    std::unique_lock wait_lock(heart_mutex_);
    while (!heart_stop_) {
      heart_cv_.wait_for(wait_lock, beat_ / 2);
      if (heart_stop_) break;
      std::lock_guard lock(call_mutex_);
      if (failed_ || clock::now() - last_sent_ < beat_) continue;
      try {
        // With a barrier, so that a rank that died while the server idles is found now too.
        send(replay_op::idle, {}, 0, 0);
        comm_.barrier();
      } catch (std::exception const& e) {
        failure_ = e.what();
        failed_ = true;
      }
    }
  }

  void stop_heart() {
    {
      std::lock_guard lock(heart_mutex_);
      heart_stop_ = true;
    }
    heart_cv_.notify_all();
    if (heart_.joinable()) heart_.join();
  }

  std::unique_ptr<M> model_;
  C& comm_;
  std::chrono::milliseconds beat_;
  mutable std::mutex call_mutex_;  // one call to the ranks at a time: send and its local run
  std::mutex pending_mutex_;       // a leaf lock: the lane host hands decisions under its own
  std::vector<decision> pending_;
  std::atomic<bool> failed_{false};
  std::string failure_;
  clock::time_point last_sent_;
  std::mutex heart_mutex_;
  std::condition_variable heart_cv_;
  bool heart_stop_ = false;
  std::thread heart_;
};

/// A rank > 0: replays rank 0's messages on `model` (this rank's shard) and its decisions on
/// `mirror` (a pool built as rank 0's), until rank 0 says stop; then every rank's censuses are
/// gathered and returned (index = rank). Throws tf::error when rank 0 dies or stops answering
/// (the communicator's deadline) or a message cannot be replayed.
template <batched_model M, class Family, dist::host_communicator C>
std::vector<kv::census> follow_leader(C& comm, M& model, lane_admission<Family>& mirror) {
  std::vector<std::byte> msg;
  std::vector<float> logits;
  std::vector<std::vector<std::int32_t>> tokens, pages;
  std::vector<batch_row> rows;
  for (;;) {
    comm.broadcast(msg, 0);
    detail::replay_reader r(msg);
    auto const op = static_cast<replay_op>(r.get<std::uint8_t>());
    auto const ds = detail::get_decisions(r);
    if (!ds.empty()) mirror.replay(ds);
    switch (op) {
      case replay_op::idle:
        comm.barrier();
        break;
      case replay_op::forward: {
        auto const n = r.get<std::uint32_t>();
        rows.assign(n, {});
        tokens.resize(n);
        pages.resize(n);
        for (std::uint32_t i = 0; i < n; ++i) {
          rows[i].start_pos = r.get<std::int32_t>();
          rows[i].state_slot = r.get<std::int32_t>();
          rows[i].all_logits = r.get<std::uint8_t>() != 0;
          tokens[i] = r.get_ints();
          pages[i] = r.get_ints();
          rows[i].tokens = tokens[i];
          rows[i].page_table = pages[i];
        }
        logits.resize(static_cast<std::size_t>(logits_rows(rows)) *
                      static_cast<std::size_t>(model.vocab_size()));
        model.forward(std::span<batch_row const>(rows), logits.data());
        break;
      }
      case replay_op::copy_page:
      case replay_op::copy_state: {
        auto const from = r.get<std::int32_t>();
        auto const to = r.get<std::int32_t>();
        if (op == replay_op::copy_page)
          model.copy_page(from, to);
        else if constexpr (stateful_model<M>)
          model.copy_state(from, to);
        else
          throw error("tf: rank 0 copied a state slot of a model without recurrent state");
        break;
      }
      case replay_op::stop:
        return gather_census(comm, mirror.census());
      default:
        throw error("tf: a replay message from rank 0 has an unknown kind {}",
                    static_cast<int>(op));
    }
  }
}

}  // namespace tf::serve
