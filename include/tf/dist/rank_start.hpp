#pragma once
/// What the ranks settle before a split model loads: that every rank opened the same model (file,
/// family, tensor shapes), refused with a message naming the first rank that differs before any
/// weight is read; and the memory budget over the ranks, sized by the smallest room any rank
/// reports (TensorFold's rule; the start-up line names the rank whose room it took).
#include <tf/dist/communicator.hpp>
#include <tf/error.hpp>
#include <tf/memory/budget.hpp>
#include <tf/memory/pool.hpp>
#include <tf/model/model_file.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tf::dist {

/// What a rank knows of its model before binding it, in a fixed size every rank can gather.
struct model_identity {
  char file[112] = {};   // the file's name (not its folder: machines may keep it elsewhere)
  char family[32] = {};  // the family the rank opened it as
  std::uint64_t tensors = 0;
  std::uint64_t shapes = 0;  // FNV-1a over every tensor's name, type and dims, in file order
  std::uint64_t bytes = 0;   // the tensors' bytes together

  static model_identity of(model::model_file const& file, std::filesystem::path const& path,
                           std::string_view family) {
    model_identity id;
    copy(path.filename().string(), id.file);
    copy(family, id.family);
    std::uint64_t h = 14695981039346656037ull;
    auto mix = [&h](void const* p, std::size_t n) {
      auto const* b = static_cast<unsigned char const*>(p);
      for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    };
    for (auto const& t : file.tensors()) {
      mix(t.name.data(), t.name.size());
      auto const type = static_cast<std::uint32_t>(t.type);
      mix(&type, sizeof type);
      for (auto d : t.dims) mix(&d, sizeof d);
      id.bytes += t.bytes;
      ++id.tensors;
    }
    id.shapes = h;
    return id;
  }

 private:
  template <std::size_t N>
  static void copy(std::string_view s, char (&out)[N]) {
    std::memcpy(out, s.data(), std::min(s.size(), N - 1));
  }
};

/// Throws tf::error on every rank unless every rank's `mine` equals rank 0's: the message names
/// the first rank that differs and what (family, file, tensor shapes), so a start where the ranks
/// opened different models stops before any weight is read.
template <communicator C>
void agree_on_model(C& c, model_identity const& mine) {
  std::vector<model_identity> all(static_cast<std::size_t>(c.size()));
  c.all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)));
  auto const& root = all[0];
  for (std::size_t r = 1; r < all.size(); ++r) {
    auto const& o = all[r];
    if (std::strncmp(o.family, root.family, sizeof o.family) != 0)
      throw error(
          "tf: rank {} opened its model as the {} family, rank 0 as {}: every rank must "
          "load the same model; nothing was read",
          r, o.family, root.family);
    if (std::strncmp(o.file, root.file, sizeof o.file) != 0)
      throw error(
          "tf: rank {} opened {}, rank 0 {}: every rank must load the same model file; "
          "nothing was read",
          r, o.file, root.file);
    if (o.shapes != root.shapes || o.tensors != root.tensors || o.bytes != root.bytes)
      throw error(
          "tf: rank {}'s {} holds {} tensors of {} bytes, rank 0's {} tensors of {} bytes "
          "{}: every rank must load the same model; nothing was read",
          r, o.file, o.tensors, o.bytes, root.tensors, root.bytes,
          o.tensors == root.tensors && o.bytes == root.bytes ? "with other shapes" : "");
  }
}

/// Runs `fn`, a start step (find the model file, open it, load a shard), on every rank; then every
/// rank learns whether all succeeded. A rank that failed throws its own error, the others one
/// naming the first rank that failed and `what` it could not do, so a step that fails on one rank
/// stops them all at once instead of at the next collective's deadline.
template <communicator C, class Fn>
std::invoke_result_t<Fn&> on_every_rank(C& c, std::string_view what, Fn&& fn) {
  std::optional<std::invoke_result_t<Fn&>> out;
  std::string failed;
  try {
    out.emplace(fn());
  } catch (std::exception const& x) {
    failed = x.what();
  }
  std::int32_t const ok = failed.empty() ? 1 : 0;
  std::vector<std::int32_t> all(static_cast<std::size_t>(c.size()));
  c.all_gather(std::as_bytes(std::span(&ok, 1)), std::as_writable_bytes(std::span(all)));
  if (!failed.empty()) throw error("{}", failed);
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r] == 0)
      throw error("tf: rank {} could not {} (its own message says why); rank {} stops too", r, what,
                  c.rank());
  return std::move(*out);
}

/// This rank's room as it reports it: its pool, at most its own cap (`--cap-gib` given to this
/// rank) above its reserve, so a rank started with a smaller cap reports the smaller room.
inline memory::pool_reading reported_room(memory::pool_reading r, memory::budget_options const& o) {
  if (o.cap_bytes) {
    auto const reserve =
        o.reserve_bytes.value_or(memory::default_reserve_bytes(r.kind, r.total_bytes));
    r.pool_bytes = std::min(r.pool_bytes, reserve + *o.cap_bytes);
  }
  return r;
}

namespace detail {

/// Every rank's report: its room (reported_room) and the weights it holds (`o.model_bytes`).
template <communicator C>
std::vector<memory::rank_report> gather_rooms(C& c, memory::pool_reading mine,
                                              memory::budget_options const& o) {
  memory::rank_report const reported{reported_room(mine, o), o.model_bytes};
  std::vector<memory::rank_report> all(static_cast<std::size_t>(c.size()));
  c.all_gather(std::as_bytes(std::span(&reported, 1)), std::as_writable_bytes(std::span(all)));
  return all;
}

}  // namespace detail

/// The budget over the ranks: every rank gathers each rank's room and weights (`o.model_bytes`
/// is this rank's) and sizes the start from the rank with the least room after its weights (the
/// same on every rank; only rank 0's admits). Its lines end with "rank N's room is the smallest
/// (X GiB)" when that rank is not rank 0. Throws tf::error as memory::compute_budget does, on
/// every rank alike.
template <communicator C>
memory::budget budget_over_ranks(C& c, memory::pool_reading mine, memory::budget_options const& o) {
  auto const all = detail::gather_rooms(c, mine, o);
  return memory::compute_budget(std::span<memory::rank_report const>(all), o, mine.parked_bytes);
}

/// A rank that does not size the start (a rank > 0 of a served model, which takes rank 0's
/// sizes) adds its room and its weights (`o.model_bytes`) to budget_over_ranks' gather.
template <communicator C>
void report_room(C& c, memory::pool_reading mine, memory::budget_options const& o) {
  detail::gather_rooms(c, mine, o);
}

}  // namespace tf::dist
