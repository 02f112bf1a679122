// What the ranks settle before a split model loads (tf/dist/rank_start.hpp), under mpirun -n 2:
// a start where the ranks opened different models is refused on every rank with a message naming
// rank 1 and what differs; the budget takes the smallest room any rank reports (a smaller machine
// or a smaller --cap-gib on rank 1), the same on every rank, and its line says whose room it took;
// a start step that fails on one rank stops them all, naming it.
#define CATCH_CONFIG_RUNNER
#include <tf/dist/mpi_communicator.hpp>
#include <tf/dist/mpi_runtime.hpp>
#include <tf/dist/rank_start.hpp>
#include <tf/model/model_file.hpp>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using tf::dist::model_identity;
using tf::dist::mpi_communicator;
using tf::memory::gib;

mpi_communicator* the_ranks = nullptr;  // made in main, after MPI starts and before it ends

std::string const qwen = std::string(TF_FIXTURES_DIR) + "/qwen";

// Rank 0 opens `path0` as `family0`, the others `path1` as `family1`; what agree_on_model says.
std::string refusal(std::string const& path0, char const* family0, std::string const& path1,
                    char const* family1) {
  auto& c = *the_ranks;
  auto const& path = c.rank() == 0 ? path0 : path1;
  auto file = tf::model::model_file::open(path);
  try {
    tf::dist::agree_on_model(c, model_identity::of(file, path, c.rank() == 0 ? family0 : family1));
  } catch (tf::error const& e) {
    return e.what();
  }
  return {};
}

tf::memory::pool_reading room(std::uint64_t pool_gib) {
  tf::memory::pool_reading r;
  r.total_bytes = r.available_bytes = r.pool_bytes = pool_gib * gib;
  return r;
}

tf::memory::budget_options start() {
  tf::memory::budget_options o;
  o.model_bytes = 2 * gib;
  o.window_tokens = 32768;
  o.kv_bytes_per_token = 64 * 1024;
  return o;
}

// Every rank's budget equals rank 0's in streams, pages and kept-prompt bytes.
bool same_on_every_rank(tf::memory::budget const& b) {
  std::int64_t const v[3] = {static_cast<std::int64_t>(b.streams),
                             static_cast<std::int64_t>(b.kv_pages),
                             static_cast<std::int64_t>(b.prompt_cache_budget_bytes)};
  for (auto x : v)
    if (the_ranks->all_reduce_min(x) != x || -the_ranks->all_reduce_min(-x) != x) return false;
  return true;
}

}  // namespace

TEST_CASE("ranks that opened the same model agree") {
  auto const path = qwen + "/tiny/tiny-f32.gguf";
  CHECK(refusal(path, "qwen3", path, "qwen3").empty());
}

TEST_CASE("a start where a rank opened another family, file or shapes is refused on every rank") {
  auto const f32 = qwen + "/tiny/tiny-f32.gguf";
  auto family = refusal(f32, "qwen3", f32, "glm4");
  INFO(family);
  CHECK(family.find("rank 1 opened its model as the glm4 family, rank 0 as qwen3") !=
        std::string::npos);
  auto file = refusal(f32, "qwen3", qwen + "/tiny/tiny-q8_0.gguf", "qwen3");
  INFO(file);
  CHECK(file.find("rank 1 opened tiny-q8_0.gguf, rank 0 tiny-f32.gguf") != std::string::npos);
  // The same file name and family over other tensors (the MoE fixture's).
  auto shapes = refusal(f32, "qwen3", qwen + "/tiny_moe/tiny-f32.gguf", "qwen3");
  INFO(shapes);
  CHECK(shapes.find("rank 1's tiny-f32.gguf holds") != std::string::npos);
  CHECK(shapes.find("nothing was read") != std::string::npos);
}

TEST_CASE("a start step that fails on one rank stops every rank, the failed one with its message") {
  auto& c = *the_ranks;
  // Every rank succeeds: each gets its own result.
  CHECK(tf::dist::on_every_rank(c, "count", [&] { return c.rank() * 10; }) == c.rank() * 10);
  // The last rank fails: it rethrows its own error, every other rank one naming it.
  int const last = c.size() - 1;
  std::string message;
  try {
    tf::dist::on_every_rank(c, "open its model file", [&] {
      if (c.rank() == last) throw tf::error("tf: no such file: /models/x.gguf");
      return 1;
    });
  } catch (tf::error const& e) {
    message = e.what();
  }
  INFO(message);
  if (c.rank() == last)
    CHECK(message == "tf: no such file: /models/x.gguf");
  else
    CHECK(message == fmt::format("tf: rank {} could not open its model file (its own message says "
                                 "why); rank {} stops too",
                                 last, c.rank()));
}

TEST_CASE("the budget over the ranks takes the smallest room and says whose it was") {
  auto& c = *the_ranks;
  auto const o = start();
  SECTION("rank 1 has the smaller machine") {
    auto const b = tf::dist::budget_over_ranks(c, room(c.rank() == 0 ? 64 : 40), o);
    auto const alone = tf::memory::compute_budget(room(40), o);
    CHECK(b.smallest_rank == 1);
    CHECK(b.streams == alone.streams);
    CHECK(b.kv_pages == alone.kv_pages);
    CHECK(b.streams < tf::memory::compute_budget(room(64), o).streams);
    CHECK(b.lines.back().find("rank 1's room is the smallest (40.0 GiB)") != std::string::npos);
    CHECK(same_on_every_rank(b));
  }
  SECTION("rank 1 was started with a smaller --cap-gib") {
    auto mine = o;
    if (c.rank() == 1) mine.cap_bytes = 8 * gib;
    auto const b = tf::dist::budget_over_ranks(c, room(64), mine);
    auto capped = o;
    capped.cap_bytes = 8 * gib;
    auto const alone = tf::memory::compute_budget(room(64), capped);
    CHECK(b.smallest_rank == 1);
    CHECK(b.streams == alone.streams);
    CHECK(b.lines.back().find("rank 1's room is the smallest") != std::string::npos);
    CHECK(same_on_every_rank(b));
  }
  SECTION("equal machines, rank 1 holds more weights: its room after them sizes the start") {
    auto mine = o;
    if (c.rank() == 1) mine.model_bytes = 20 * gib;
    auto const b = tf::dist::budget_over_ranks(c, room(64), mine);
    auto heavy = o;
    heavy.model_bytes = 20 * gib;
    auto const alone = tf::memory::compute_budget(room(64), heavy);
    CHECK(b.smallest_rank == 1);
    CHECK(b.model_bytes == 20 * gib);
    CHECK(b.streams == alone.streams);
    CHECK(b.streams < tf::memory::compute_budget(room(64), o).streams);
    CHECK(same_on_every_rank(b));
  }
  SECTION("rank 1's smaller machine holds a smaller share: rank 0's room after its weights sizes") {
    auto mine = o;
    mine.model_bytes = c.rank() == 0 ? 30 * gib : 2 * gib;
    auto const b = tf::dist::budget_over_ranks(c, room(c.rank() == 0 ? 64 : 48), mine);
    auto heavy = o;
    heavy.model_bytes = 30 * gib;
    CHECK(b.smallest_rank == 0);
    CHECK(b.left_bytes == tf::memory::compute_budget(room(64), heavy).left_bytes);
    CHECK(same_on_every_rank(b));
  }
  SECTION("rank 0's room is the smallest: no clause") {
    auto const b = tf::dist::budget_over_ranks(c, room(c.rank() == 0 ? 40 : 64), o);
    CHECK(b.smallest_rank == 0);
    CHECK(b.streams == tf::memory::compute_budget(room(40), o).streams);
    CHECK(b.lines.back().find("room is the smallest") == std::string::npos);
    CHECK(same_on_every_rank(b));
  }
}

int main(int argc, char** argv) {
  tf::dist::mpi_runtime mpi(&argc, &argv);
  mpi_communicator c;
  the_ranks = &c;
  return Catch::Session().run(argc, argv);
}
