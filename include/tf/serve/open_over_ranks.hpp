#pragma once
/// serve::open_served_over_ranks and serve::follow_over_ranks: one model split over ranks, served
/// by rank 0 and replayed by the others (rank_replay.hpp). Every rank opens the file mapped,
/// agrees on the model before any weight is read, sizes the start from the smallest room (rank 0
/// decides and tells the others its pool), loads its shard, and then rank 0 serves while the
/// others follow. Two communicators over the same ranks: `comm` carries the start and the rounds
/// (host bytes: MPI), `data` the backend's float collectives (the same MPI communicator on the
/// CPU backend, NCCL's on CUDA).
#include <families/registry.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/dist/communicator.hpp>
#include <tf/dist/rank_start.hpp>
#include <tf/dist/tensor_parallel.hpp>
#include <tf/engine/open.hpp>
#include <tf/error.hpp>
#include <tf/model/model_file.hpp>
#include <tf/serve/open_served.hpp>
#include <tf/serve/rank_replay.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tf::serve {

/// Rank 0's served model and its link to the other ranks (owned by `served`).
struct served_over_ranks {
  std::shared_ptr<served_model> served;
  rank_link* link = nullptr;
};

/// The deadlines of a split start: the checks before the load (the ranks start together), loading
/// (ranks read their shards at different speeds) and serving (a rank that stops answering for
/// this long is reported).
struct rank_deadlines {
  std::chrono::milliseconds start{std::chrono::minutes(2)};
  std::chrono::milliseconds load{std::chrono::minutes(30)};
  std::chrono::milliseconds serving{std::chrono::seconds(5)};
  std::chrono::milliseconds beat{std::chrono::seconds(1)};  // rank 0's idle message period
};

namespace detail {

/// What rank 0 tells the others once it sized the start.
struct rank_pool {
  std::uint64_t parallel = 0;
  std::uint64_t pages = 0;
  std::uint64_t state_slots = 0;  // the engine's recurrent-state slots
  std::uint64_t max_queue = 0;
};

template <class C>
void set_deadline(C& comm, std::chrono::milliseconds t) {
  if constexpr (requires { comm.set_timeout(t); }) comm.set_timeout(t);
}

template <class B, class D>
typename B::options split_options(open_options const& o, D& data) {
  auto bo = backend_options<B>(o);
  bo.ranks = dist::tensor_parallel::over(data);
  return bo;
}

/// A rank's shard bound before the budget, on a one-page pool, and what it costs.
template <class E>
struct bound_shard {
  std::unique_ptr<E> engine;
  model_costs costs;
};

/// Binds this rank's shard of the mapped `file` on a one-page KV pool, so that the budget counts
/// the weights this rank holds, not the file's. On the host: views of its rows and copies of its
/// column slices, and read into memory (`o.load`), the whole file beside its copies; on a device:
/// its uploads, every one held from the bind on.
template <class F, class B, class C, class D>
bound_shard<file_engine<F, B>> bind_shard(C& comm, D& data, std::unique_ptr<model::model_file> file,
                                          std::filesystem::path const& path,
                                          open_options const& o) {
  using E = file_engine<F, B>;
  auto const ranks = dist::tensor_parallel::over(data);
  model_costs costs{F::name, E::kv_bytes_per_token(*file, o.kv, ranks),
                    E::state_bytes_per_stream(*file, ranks), std::nullopt, 0};
  kv_shape const one_page{1, o.page_tokens, o.kv, E::has_state ? 1 : 0};
  auto e = dist::on_every_rank(comm, "load its shard of the model", [&] {
    return std::make_unique<E>(std::move(file), one_page, split_options<B>(o, data));
  });
  auto const w = e->backend().weights_bound();
  bool const whole_file_read =
      B::memory == memory::memory_kind::host && o.load == model::load_mode::read;
  costs.weight_bytes = whole_file_read ? model::file_bytes(path) + w.copied_bytes : w.bytes;
  costs.weight_bytes_held = w.copied_bytes;
  return {std::move(e), costs};
}

/// Rank 0's `size(costs)`; when it throws (the model does not fit), the others learn it from an
/// empty pool before rank 0 rethrows, instead of waiting for the pool until the deadline.
template <class C>
pool_size size_or_tell(C& comm, std::function<pool_size(model_costs const&)> const& size,
                       model_costs const& costs) {
  try {
    return size(costs);
  } catch (...) {
    rank_pool none;
    comm.broadcast(std::as_writable_bytes(std::span(&none, 1)), 0);
    throw;
  }
}

/// The bound shard with rank 0's pool: its KV reshaped, or, read into host memory, loaded again
/// from the file read whole (its views then point into the read copy).
template <class F, class B, class C, class D>
std::unique_ptr<file_engine<F, B>> size_shard(C& comm, D& data,
                                              std::unique_ptr<file_engine<F, B>> e,
                                              std::filesystem::path const& path,
                                              open_options const& o, rank_pool const& pool) {
  kv_shape const kv{static_cast<std::int32_t>(pool.pages), o.page_tokens, o.kv,
                    static_cast<std::int32_t>(pool.state_slots)};
  if (B::memory != memory::memory_kind::host || o.load != model::load_mode::read) {
    e->reshape_kv(kv);
    return e;
  }
  e.reset();
  return dist::on_every_rank(comm, "load its shard of the model", [&] {
    auto file = std::make_unique<model::model_file>(model::model_file::open(path, o.load));
    return std::make_unique<file_engine<F, B>>(std::move(file), kv, split_options<B>(o, data));
  });
}

/// The backend's float collectives must live where its floats do: one message at compile time.
template <class B, class D>
constexpr void check_data_communicator() {
  static_assert(dist::communicator<D>,
                "tf: the data communicator of a split model is not a tf::dist::communicator; "
                "instantiate tf::dist::communicator_check<D> for what it lacks.");
  static_assert(
      (B::memory == memory::memory_kind::host) == (D::float_memory == dist::memory_space::host),
      "tf: the data communicator's floats must live where the backend's do: "
      "mpi_communicator for backend::cpu, nccl_communicator for backend::cuda.");
}

}  // namespace detail

/// Rank 0: as open_served on backend B, with the weights split over the ranks. `size` sizes the
/// start (it must call dist::budget_over_ranks, which the other ranks' report_room pairs with).
template <class Registry = families::builtin, class B = backend::cpu, dist::host_communicator C,
          class D>
served_over_ranks open_served_over_ranks(C& comm, D& data, std::filesystem::path const& path,
                                         open_options const& o, host_config host,
                                         std::function<pool_size(model_costs const&)> const& size,
                                         std::string const& chat_template, draft_config drafts,
                                         rank_deadlines deadlines) {
  detail::check_data_communicator<B, D>();
  detail::set_deadline(comm, deadlines.start);
  auto file = dist::on_every_rank(comm, "open its model file", [&] {
    return std::make_unique<model::model_file>(
        model::model_file::open(path, model::load_mode::map));
  });
  served_over_ranks out;
  with_family<Registry, B>(*file, [&](auto family_type) {
    using F = typename decltype(family_type)::type;
    using E = file_engine<F, B>;
    using L = rank_leader<E, C>;
    dist::agree_on_model(comm, dist::model_identity::of(*file, path, F::name));
    auto codec =
        tokenizer::load_codec(*file, path, path.filename().string(), builtin_chat_template<F>());
    if (!chat_template.empty())
      codec = tokenizer::text_codec(codec.tokens(), codec.model_id(), chat_template);
    detail::set_deadline(comm, deadlines.load);
    auto bound = detail::bind_shard<F, B>(comm, data, std::move(file), path, o);
    detail::set_deadline(comm, deadlines.start);
    auto const granted = detail::size_or_tell(comm, size, bound.costs);
    host.parallel = granted.parallel;
    std::int32_t const slots =
        E::has_state ? static_cast<std::int32_t>((drafts.source ? 3 : 2) * granted.parallel) : 0;
    detail::rank_pool pool{granted.parallel, granted.pages, static_cast<std::uint64_t>(slots),
                           host.max_queue};
    comm.broadcast(std::as_writable_bytes(std::span(&pool, 1)), 0);
    auto e = detail::size_shard<F, B>(comm, data, std::move(bound.engine), path, o, pool);
    std::int64_t admission_slots = lane_host<E, F>::admission_slots(*e, host, drafts);
    comm.broadcast(std::as_writable_bytes(std::span(&admission_slots, 1)), 0);
    detail::set_deadline(comm, deadlines.serving);
    auto leader = std::make_unique<L>(std::move(e), comm, deadlines.beat);
    auto* link = leader.get();
    host.ranks = comm.size();
    host.decisions = [link](std::vector<decision> ds) { link->take(std::move(ds)); };
    out.link = link;
    out.served = std::make_shared<lane_served_model<L, F, tokenizer::text_codec>>(
        std::move(leader), std::move(codec), host, drafts);
  });
  return out;
}

/// The CPU backend's ranks: one MPI communicator carries both the rounds and the floats.
template <class Registry = families::builtin, dist::host_communicator C>
served_over_ranks open_served_over_ranks(C& comm, std::filesystem::path const& path,
                                         open_options const& o, host_config host,
                                         std::function<pool_size(model_costs const&)> const& size,
                                         std::string const& chat_template, draft_config drafts,
                                         rank_deadlines deadlines) {
  return open_served_over_ranks<Registry, backend::cpu>(
      comm, comm, path, o, std::move(host), size, chat_template, std::move(drafts), deadlines);
}

/// A rank > 0: opens and checks the model with rank 0, reports its room (`room(costs)` calls
/// dist::report_room), loads its shard of the pool rank 0 sized on backend B, and replays rank
/// 0's calls until it stops. Returns every rank's census (index = rank). Throws tf::error when
/// rank 0 dies or stops answering, naming it.
template <class Registry = families::builtin, class B = backend::cpu, dist::host_communicator C,
          class D>
std::vector<kv::census> follow_over_ranks(C& comm, D& data, std::filesystem::path const& path,
                                          open_options const& o,
                                          std::function<void(model_costs const&)> const& room,
                                          rank_deadlines deadlines) {
  detail::check_data_communicator<B, D>();
  detail::set_deadline(comm, deadlines.start);
  auto file = dist::on_every_rank(comm, "open its model file", [&] {
    return std::make_unique<model::model_file>(
        model::model_file::open(path, model::load_mode::map));
  });
  std::vector<kv::census> out;
  with_family<Registry, B>(*file, [&](auto family_type) {
    using F = typename decltype(family_type)::type;
    dist::agree_on_model(comm, dist::model_identity::of(*file, path, F::name));
    detail::set_deadline(comm, deadlines.load);
    auto bound = detail::bind_shard<F, B>(comm, data, std::move(file), path, o);
    detail::set_deadline(comm, deadlines.start);
    room(bound.costs);
    detail::rank_pool pool;
    comm.broadcast(std::as_writable_bytes(std::span(&pool, 1)), 0);
    if (pool.parallel == 0)
      throw error(
          "tf: rank 0 could not size the start (its own message says why); rank {} stops too",
          comm.rank());
    auto engine = detail::size_shard<F, B>(comm, data, std::move(bound.engine), path, o, pool);
    auto& e = *engine;
    lane_config lc;
    lc.max_running = static_cast<std::size_t>(pool.parallel);
    lc.max_queue = static_cast<std::size_t>(pool.max_queue);
    lc.rank = comm.rank();
    lc.ranks = comm.size();
    lc.log = [](std::string_view) {};
    std::int64_t admission_slots = 0;
    comm.broadcast(std::as_writable_bytes(std::span(&admission_slots, 1)), 0);
    lane_admission<F> mirror(pool_config_from<pool_of<F>>::make(e, admission_slots), lc);
    detail::set_deadline(comm, deadlines.serving);
    out = follow_leader(comm, e, mirror);
  });
  return out;
}

/// The CPU backend's ranks, one communicator for both.
template <class Registry = families::builtin, dist::host_communicator C>
std::vector<kv::census> follow_over_ranks(C& comm, std::filesystem::path const& path,
                                          open_options const& o,
                                          std::function<void(model_costs const&)> const& room,
                                          rank_deadlines deadlines) {
  return follow_over_ranks<Registry, backend::cpu>(comm, comm, path, o, room, deadlines);
}

}  // namespace tf::serve
