// The CUDA backend split over the ranks of mpirun (-n 2 over shared memory), without a GPU:
// backend::cuda's host code over the fake CUDA runtime and host copies of the kernels
// (tests/cuda_host), so a "device" pointer is host memory and an MPI communicator can stand in for
// NCCL's (both reduce in rank order; the backend takes ranks whose floats live on its device).
// Each rank binds its slice of every weight, the row-parallel matmuls and the split experts end
// with the all-reduce after the stream is done, and the family's forward runs unchanged: against
// the same model whole on the same backend, the prompt's logits and greedy steps within the f32
// regrouping of the row-parallel sums, the same greedy tokens, every rank's logits equal bit for
// bit. On a GPU the communicator is nccl_communicator (tests/dist/nccl_communicator_test.cpp).
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

#include <catch2/catch.hpp>

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

int main(int argc, char** argv) {
  return tf::test::split::run(argc, argv);
}
