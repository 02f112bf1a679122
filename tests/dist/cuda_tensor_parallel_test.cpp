// The CUDA backend split over the ranks of mpirun (-n 2 over shared memory), without a GPU:
// backend::cuda's host code over the fake CUDA runtime and host copies of the kernels
// (tests/cuda_host), so a "device" pointer is host memory and an MPI communicator can stand in for
// NCCL's (both reduce in rank order; the backend takes ranks whose floats live on its device).
// Each rank binds its slice of every weight (the head its vocabulary rows, logits gathered), the
// row-parallel matmuls and the split experts end with the all-reduce after the stream is done,
// and the family's forward runs unchanged: against
// the same model whole on the same backend, the prompt's logits and greedy steps within the f32
// regrouping of the row-parallel sums, the same greedy tokens, every rank's logits equal bit for
// bit. On a GPU the communicator is nccl_communicator (tests/dist/nccl_communicator_test.cpp).
// Served over the ranks as `serve --tp 2 --backend cuda` serves (open_served_over_ranks on rank
// 0, follow_over_ranks on rank 1, the MPI communicator carrying the rounds, a device-floats view
// of it the backend's sums): replies equal the whole model's served on one rank, censuses agree.
#define CATCH_CONFIG_RUNNER
#include <tests/cuda_host/fake_cuda_runtime.hpp>
#include <tests/cuda_host/host_launchers.hpp>

#include <families/gemma/gemma3.hpp>
#include <families/glm/glm4_moe.hpp>
#include <families/nemotron/nemotron_h.hpp>
#include <families/qwen/qwen3.hpp>
#include <families/qwen/qwen35.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tests/dist/split_ranks.hpp>
#include <tf/backend/cuda.hpp>
#include <tf/engine/engine.hpp>
#include <tf/model/model_file.hpp>
#include <tf/registry.hpp>
#include <tf/serve/open_over_ranks.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace {

using tf::backend::cuda;
using tf::model::model_file;
using tf::test::split::equal_on_every_rank;
using tf::test::split::ranks;

std::string const fixtures = TF_FIXTURES_DIR;

// The MPI ranks as the CUDA backend takes them: the fake runtime's device memory is host memory,
// so the host communicator reduces it in place, as NCCL reduces a GPU's.
tf::dist::tensor_parallel device_ranks() {
  auto r = tf::dist::tensor_parallel::over(ranks());
  r.floats = tf::dist::memory_space::device;
  return r;
}

// The MPI ranks as a communicator whose floats are on the device (the fake runtime's device
// memory is host memory): what nccl_communicator is on a GPU, bytes and floats alike.
struct device_floats {
  static constexpr tf::dist::memory_space float_memory = tf::dist::memory_space::device;
  tf::dist::mpi_communicator& host;

  int rank() const { return host.rank(); }
  int size() const { return host.size(); }
  void all_reduce_sum(std::span<float> x) { host.all_reduce_sum(x); }
  void all_gather(std::span<float const> mine, std::span<float> out) { host.all_gather(mine, out); }
  void all_gather(std::span<std::byte const> mine, std::span<std::byte> out) {
    host.all_gather(mine, out);
  }
  void broadcast(std::span<std::byte> data, int root) { host.broadcast(data, root); }
  void broadcast(std::vector<std::byte>& data, int root) { host.broadcast(data, root); }
  void barrier() { host.barrier(); }
  std::int64_t all_reduce_min(std::int64_t v) { return host.all_reduce_min(v); }
};
static_assert(tf::dist::communicator<device_floats>);

// Tolerance: f32 weights, so only the row-parallel sums' order differs from the whole model's
// (a few ulps of the hidden state through the tiny fixtures' layers; logits are O(1)).
template <class Family>
void check_split(std::string const& dir, std::string const& file_name) {
  using engine = tf::engine<Family, cuda>;
  auto file = model_file::open(dir + "/" + file_name);
  tf::kv_shape const kv{64, 16, tf::kv_dtype::f32, engine::has_state ? 1 : 0};
  engine whole(file, kv, {});
  engine split(file, kv, {0, tf::backend::cuda_matmul::own, device_ranks()});
  int const n = ranks().size();
  INFO(dir << "/" << file_name);
  CHECK(split.hparams().num_heads * n == whole.hparams().num_heads);
  // Every mixer's output projection holds this rank's input features and is all-reduced.
  for (auto const& L : split.bound_weights().layers) {
    auto const* out = &L.attn.o;
    if constexpr (requires { L.delta.out; })
      if (out->empty()) out = &L.delta.out;
    if constexpr (requires { L.mamba.out; })
      if (out->empty()) out = &L.mamba.out;
    if (!out->empty()) CHECK(out->partial_sum);
  }
  // The head is split by vocabulary: this rank's rows, its logits gathered.
  auto const& head = split.bound_weights().output;
  CHECK(head.vocab == whole.vocab_size());
  CHECK(head.rows * n == whole.vocab_size());
  CHECK(whole.bound_weights().output.vocab == 0);
  auto const vocab = static_cast<std::size_t>(whole.vocab_size());
  for (auto const& prompt : tf::test::hf_oracle_at(dir).prompts) {
    tf::test::stream a(whole), b(split);
    auto la = a.feed(prompt, true);
    auto lb = b.feed(prompt, true);
    float err = tf::test::max_abs_diff(la, lb);
    CHECK(equal_on_every_rank(lb));
    for (int step = 0; step < 6; ++step) {
      auto const ta = tf::test::argmax(std::span<float const>(la).last(vocab));
      auto const tb = tf::test::argmax(std::span<float const>(lb).last(vocab));
      CHECK(ta == tb);
      if (ta != tb) break;
      la = a.feed({&ta, 1}, false);
      lb = b.feed({&tb, 1}, false);
      err = std::max(err, tf::test::max_abs_diff(la, lb));
      CHECK(equal_on_every_rank(lb));
    }
    INFO("max |TP=" << n << " - TP=1| = " << err);
    CHECK(err <= 1e-5f);
  }
}

}  // namespace

TEST_CASE("CUDA TP: the backend takes ranks whose floats are on its device") {
  auto host = tf::dist::tensor_parallel::over(ranks());
  CHECK_THROWS_WITH(cuda({0, tf::backend::cuda_matmul::own, host}),
                    Catch::Contains("must reduce floats in device memory"));
  auto reduceless = device_ranks();
  reduceless.all_reduce_sum = nullptr;
  CHECK_THROWS_WITH(cuda({0, tf::backend::cuda_matmul::own, reduceless}),
                    Catch::Contains("without an all-reduce"));
}

TEST_CASE("CUDA TP: dense, MoE and hybrid fixtures split over the ranks on the CUDA backend") {
  using namespace tf::families;
  check_split<qwen::qwen3>(fixtures + "/qwen/tiny", "tiny-f32.gguf");
  check_split<gemma::gemma3>(fixtures + "/gemma/tiny", "tiny-f32.gguf");  // one KV head
  check_split<glm::glm4_moe>(fixtures + "/glm/tiny45", "tiny-f32.gguf");  // routed + shared
  check_split<qwen::qwen35>(fixtures + "/qwen/tiny35", "tiny-f32.gguf");  // Gated DeltaNet
  check_split<nemotron::nemotron_h>(fixtures + "/nemotron/tiny_h_latent",
                                    "tiny-f32.gguf");  // Mamba2, latent relu² experts
}

namespace {

using namespace std::chrono_literals;

std::vector<std::int32_t> reply(tf::serve::served_model& m, std::vector<std::int32_t> prompt) {
  tf::serve::generation_request r;
  r.prompt = std::move(prompt);
  r.max_tokens = 10;
  auto s = m.submit(std::move(r));
  REQUIRE(s.status == tf::serve::submit_status::admitted);
  std::vector<std::int32_t> out;
  for (auto deadline = std::chrono::steady_clock::now() + 60s;;) {
    auto c = s.stream->next(100ms);
    for (auto const& t : c.tokens) out.push_back(t.token);
    INFO(c.error);
    CHECK(c.error.empty());
    if (c.done || std::chrono::steady_clock::now() > deadline) break;
  }
  return out;
}

}  // namespace

TEST_CASE("CUDA TP: a model served over the ranks on the CUDA backend, as serve --tp runs it") {
  using qwen3_only = tf::families::registry<tf::families::qwen::qwen3>;
  auto& comm = ranks();
  device_floats devices{comm};
  auto const path = fixtures + "/qwen/tiny/tiny-f32.gguf";
  tf::open_options o;
  o.threads = 1;
  o.load = tf::model::load_mode::map;
  o.kv = tf::kv_dtype::f32;
  o.page_tokens = 16;
  tf::serve::host_config const host{4, 128, 16, 32};
  std::vector<std::vector<std::int32_t>> const prompts{{1, 5, 9, 2}, {7, 7, 3}, {11, 4, 6, 8, 2}};
  tf::serve::rank_deadlines deadlines;
  deadlines.serving = 20s;  // the fake runtime's kernels run on the host, at -O1
  if (comm.rank() == 0) {
    tf::serve::model_costs seen{};
    auto size = [&](tf::serve::model_costs const& c) {
      seen = c;
      comm.barrier();  // pairs with the other ranks' room report
      return tf::serve::pool_size{4, 40};
    };
    auto split = tf::serve::open_served_over_ranks<qwen3_only, cuda>(
        comm, devices, path, o, host, size, std::string(), {}, deadlines);
    REQUIRE(split.served);
    REQUIRE(split.link != nullptr);
    // On a device every byte of a rank's share is a copy made at the bind.
    auto const whole_bytes = [&] {
      auto file = model_file::open(path);
      tf::engine<tf::families::qwen::qwen3, cuda> whole(file, {1, 16, tf::kv_dtype::f32, 0}, {});
      return whole.backend().weights_bound().bytes;
    }();
    CHECK(seen.weight_bytes.value_or(0) > 0);
    CHECK(seen.weight_bytes_held == seen.weight_bytes.value_or(0));
    CHECK(seen.weight_bytes.value_or(0) < whole_bytes);
    auto one =
        tf::serve::open_served<qwen3_only, cuda>(path, o, host, [](tf::serve::model_costs const&) {
          return tf::serve::pool_size{4, 40};
        });
    for (auto const& p : prompts) {
      auto const a = reply(*one, p), b = reply(*split.served, p);
      CHECK(a.size() == 10);
      CHECK(a == b);
    }
    auto const mine = split.served->shutdown(1s);
    CHECK(mine.balanced());
    auto const all = split.link->finish(mine);
    REQUIRE(all.size() == static_cast<std::size_t>(comm.size()));
    for (auto const& c : all) CHECK(c == mine);
    one->shutdown(1s);
  } else {
    auto room = [&](tf::serve::model_costs const& c) {
      CHECK(c.weight_bytes_held == c.weight_bytes.value_or(0));
      comm.barrier();
    };
    auto const all =
        tf::serve::follow_over_ranks<qwen3_only, cuda>(comm, devices, path, o, room, deadlines);
    REQUIRE(all.size() == static_cast<std::size_t>(comm.size()));
    CHECK(all[static_cast<std::size_t>(comm.rank())].balanced());
    CHECK(all[static_cast<std::size_t>(comm.rank())] == all[0]);
  }
}

int main(int argc, char** argv) {
  return tf::test::split::run(argc, argv);
}
