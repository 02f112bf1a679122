// A model split over the ranks of mpirun (tests/dist/CMakeLists.txt: -n 2 over shared memory):
// each rank binds its slice of every weight (column-parallel q/k/v and gate/up, row-parallel o and
// down with the rank-order all-reduce after them, KV heads replicated where the ranks outnumber
// them) and runs the family's unchanged forward. Against the same model whole in the same process:
// logits within a tolerance (only the row-parallel sums' order changes, docs/kernel-contract.md),
// the same greedy tokens, and every rank's logits equal bit for bit.
#define CATCH_CONFIG_RUNNER
#include <families/gemma/gemma3.hpp>
#include <families/gemma/gemma4.hpp>
#include <families/glm/glm4.hpp>
#include <families/glm/glm4_moe.hpp>
#include <families/nemotron/nemotron_h.hpp>
#include <families/qwen/qwen3.hpp>
#include <families/qwen/qwen35.hpp>
#include <families/qwen/qwen35_moe.hpp>
#include <families/qwen/qwen3_moe.hpp>
#include <families/qwen/qwen3_next.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tests/dist/split_ranks.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/model/default_model.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace {

using tf::backend::cpu;
using tf::model::model_file;
using tf::test::split::equal_on_every_rank;
using tf::test::split::ranks;

std::string const fixtures = TF_FIXTURES_DIR;

struct case_params {
  std::vector<std::vector<std::int32_t>> prompts;
  std::size_t greedy = 8;
  float tolerance = 0;  // max |split - whole| over the prompt's and the greedy steps' logits
};

// n greedy steps after `last` (a logits row), each step's logits and the top two's margin.
struct greedy_run {
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<float>> logits;
  std::vector<float> margin;
};
template <class Stream>
greedy_run greedy(Stream& s, std::vector<float> last, std::size_t n) {
  greedy_run g;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<float> sorted = last;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    g.margin.push_back(sorted[0] - sorted[1]);
    g.tokens.push_back(tf::test::argmax(last));
    g.logits.push_back(last);
    last = s.feed({&g.tokens.back(), 1}, false);
  }
  return g;
}

// A row-parallel matrix of layer `l` of bound weights `w`: attention's o, or where the layer has
// no attention (a hybrid's recurrent, MLP or MoE layer) its output projection, MLP down or first
// expert's down.
template <class Weights>
auto const& row_parallel(Weights const& w, std::size_t l) {
  auto const& L = w.layers[l];
  if constexpr (requires { L.delta.out; }) {
    return L.attn.o.rows ? L.attn.o : L.delta.out;
  } else if constexpr (requires { L.mamba.out; }) {
    if (L.attn.o.rows) return L.attn.o;
    if (L.mamba.out.rows) return L.mamba.out;
    return L.mlp.down.rows ? L.mlp.down : L.moe.experts.at(0).down;
  } else {
    return L.attn.o;
  }
}

// The model at `path` whole (one rank) and split over every rank of the run, side by side. Greedy
// tokens must agree wherever the whole model's top two differ by more than twice the tolerance
// (each may move by it); the first step within that margin may go either way, and the two runs
// then read different tokens, so the comparison stops there.
template <class Family>
void check_split(std::string const& path, case_params const& c) {
  using engine = tf::engine<Family, cpu>;
  using stream = tf::test::stream<engine>;
  auto file = model_file::open(path);
  tf::kv_shape const kv{64, 16, tf::kv_dtype::f32, engine::has_state ? 1 : 0};
  engine whole(file, kv, {1});
  engine split(file, kv, {1, tf::dist::tensor_parallel::over(ranks())});
  int const n = ranks().size();
  // The split is real: this rank holds its share of the heads and, in every layer, of the
  // row-parallel output's input features.
  CHECK(split.hparams().num_heads * n == whole.hparams().num_heads);
  for (std::size_t l = 0; l < whole.bound_weights().layers.size(); ++l) {
    auto const& o_whole = row_parallel(whole.bound_weights(), l);
    auto const& o_split = row_parallel(split.bound_weights(), l);
    INFO("layer " << l);
    CHECK(o_split.cols * n == o_whole.cols);
    CHECK(o_split.partial_sum);
    CHECK_FALSE(o_whole.partial_sum);
  }
  // The head is split by vocabulary rows (every fixture's vocabulary divides over two ranks).
  auto const& head = split.bound_weights().output;
  CHECK(head.vocab == whole.vocab_size());
  CHECK(head.rows * n == whole.vocab_size());
  CHECK(whole.bound_weights().output.vocab == 0);
  // The start-up budget's KV bytes per position are what this rank's store holds (its share of
  // the KV heads), read from the file before anything binds.
  for (auto dt : {tf::kv_dtype::f16, tf::kv_dtype::f32}) {
    auto const tp = tf::dist::tensor_parallel::over(ranks());
    CHECK(engine::kv_bytes_per_token(file, dt, tp) ==
          tf::backend::kv_bytes_per_token(engine::kv_layout(split.hparams()), dt));
    CHECK(engine::kv_bytes_per_token(file, dt) ==
          tf::backend::kv_bytes_per_token(engine::kv_layout(whole.hparams()), dt));
  }
  // And its recurrent state per stream is its share of the recurrent heads' (hybrids).
  auto const tp = tf::dist::tensor_parallel::over(ranks());
  CHECK(engine::state_bytes_per_stream(file, tp) ==
        static_cast<std::uint64_t>(split.state_bytes()));
  if (engine::has_state)
    CHECK(engine::state_bytes_per_stream(file, tp) * n == engine::state_bytes_per_stream(file));
  // The start-up budget counts this rank's weights: less than the whole model's, and the ranks'
  // shares together at least the whole (what is replicated counts on every rank).
  auto const mine = split.backend().weights_bound().bytes;
  std::vector<std::uint64_t> shares(static_cast<std::size_t>(n));
  ranks().all_gather(std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(shares)));
  std::uint64_t together = 0;
  for (auto b : shares) together += b;
  CHECK(mine < whole.backend().weights_bound().bytes);
  CHECK(together >= whole.backend().weights_bound().bytes);
  auto const vocab = static_cast<std::size_t>(whole.vocab_size());
  for (std::size_t p = 0; p < c.prompts.size(); ++p) {
    auto const& prompt = c.prompts[p];
    stream a(whole), b(split);
    auto const la = a.feed(prompt, true);
    auto const lb = b.feed(prompt, true);
    float err = tf::test::max_abs_diff(la, lb);
    CHECK(equal_on_every_rank(lb));
    auto const ga = greedy(a, {la.end() - static_cast<std::ptrdiff_t>(vocab), la.end()}, c.greedy);
    auto const gb = greedy(b, {lb.end() - static_cast<std::ptrdiff_t>(vocab), lb.end()}, c.greedy);
    std::size_t same = 0;
    while (same < c.greedy && ga.tokens[same] == gb.tokens[same]) {
      err = std::max(err, tf::test::max_abs_diff(ga.logits[same], gb.logits[same]));
      CHECK(equal_on_every_rank(gb.logits[same]));
      ++same;
    }
    INFO(path << " prompt " << p << ": max |TP=" << n << " - TP=1| = " << err << " (tolerance "
              << c.tolerance << "); greedy tokens equal for " << same << " of " << c.greedy);
    CHECK(err <= c.tolerance);
    if (same < c.greedy) CHECK(ga.margin[same] <= 2 * c.tolerance);
  }
}

// The weights the budget counts (cpu::weights_bound) against a GGUF file's tensors: whole, every
// tensor once (a tied head is its embedding's bytes, and a rank's rows of it lie inside them);
// split, the replicated tensors whole and 1/n of each split one (an untied head by vocabulary).
// Copied at the bind: the norm vectors, and 1/n of each row-parallel weight (a rank's input
// features, not one run of the file).
template <class Family>
void check_weight_share(std::string const& path, std::vector<std::string> const& column_parallel,
                        std::vector<std::string> const& row_parallel) {
  using engine = tf::engine<Family, cpu>;
  auto file = model_file::open(path);
  engine whole(file, {1, 16}, {1});
  engine split(file, {1, 16}, {1, tf::dist::tensor_parallel::over(ranks())});
  auto const n = static_cast<std::uint64_t>(ranks().size());
  auto is = [](std::string const& name, std::vector<std::string> const& roles) {
    return std::any_of(roles.begin(), roles.end(), [&](auto const& r) {
      return name == r + ".weight" || name.find("." + r + ".weight") != std::string::npos;
    });
  };
  std::uint64_t all = 0, norms = 0, split_bytes = 0, rows = 0;
  for (auto const& t : file.tensors()) {
    all += t.bytes;
    if (t.name.find("norm") != std::string::npos) norms += t.bytes;
    if (is(t.name, column_parallel) || is(t.name, row_parallel)) split_bytes += t.bytes;
    if (is(t.name, row_parallel)) rows += t.bytes;
  }
  INFO(path);
  auto const w = whole.backend().weights_bound(), s = split.backend().weights_bound();
  CHECK(w.bytes == all);
  CHECK(w.copied_bytes == norms);
  CHECK(s.bytes == all - split_bytes + split_bytes / n);
  CHECK(s.copied_bytes == norms + rows / n);
}

case_params oracle_case(std::string const& dir, float tolerance) {
  auto const& o = tf::test::hf_oracle_at(dir);
  return {o.prompts, 12, tolerance};
}

}  // namespace

// Tolerances: the tiny fixtures' logits are O(1); f32 weights differ from TP=1 only by the order of
// the row-parallel partial sums (a few ulps of the hidden state, grown through the layers).
TEST_CASE("TP: tiny Qwen3 split over the ranks: F32 GGUF, safetensors and Q8_0") {
  auto const dir = fixtures + "/qwen/tiny";
  check_split<tf::families::qwen::qwen3>(dir + "/tiny-f32.gguf", oracle_case(dir, 1e-5f));
  check_split<tf::families::qwen::qwen3>(dir, oracle_case(dir, 1e-5f));
  check_split<tf::families::qwen::qwen3>(dir + "/tiny-q8_0.gguf", oracle_case(dir, 1e-5f));
  for (auto const* name : {"/tiny-f32.gguf", "/tiny-q8_0.gguf"})
    check_weight_share<tf::families::qwen::qwen3>(
        dir + name, {"attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up", "output"},
        {"attn_output", "ffn_down"});
}

TEST_CASE("TP: tiny Gemma 3 (one KV head, replicated) split over the ranks") {
  auto const dir = fixtures + "/gemma/tiny";
  check_split<tf::families::gemma::gemma3>(dir + "/tiny-f32.gguf", oracle_case(dir, 1e-5f));
  check_split<tf::families::gemma::gemma3>(dir, oracle_case(dir, 1e-5f));
  check_split<tf::families::gemma::gemma3>(dir + "/tiny-q8_0.gguf", oracle_case(dir, 1e-5f));
}

TEST_CASE("TP: tiny Gemma 4 split over the ranks: sliding and full layers, KV-shared layers") {
  using tf::families::gemma::gemma4;
  // Gemma 4's residual stream is wider in scale (layer scalars, per-layer inputs): the f32
  // regrouping of the row-parallel sums moves its logits by up to ~1e-4 (measured 9.8e-5).
  float const f32 = 2e-4f;
  // K = V full layers and a double-wide MLP in the shared layers; F32 GGUF and safetensors.
  auto const dense = fixtures + "/gemma/tiny4";
  check_split<gemma4>(dense + "/tiny-f32.gguf", oracle_case(dense, f32));
  check_split<gemma4>(dense, oracle_case(dense, f32));
  // Per-layer embeddings (replicated) beside split attention and MLPs; and Q8_0, where a last-bit
  // change can flip one 8-bit activation quantum, as on the default model (measured 0.020).
  auto const e = fixtures + "/gemma/tiny4_e";
  check_split<gemma4>(e + "/tiny-f32.gguf", oracle_case(e, f32));
  check_split<gemma4>(e + "/tiny-q8_0.gguf", oracle_case(e, 0.05f));
  // MoE: the dense MLP split, the experts whole on every rank.
  auto const moe = fixtures + "/gemma/tiny4_moe";
  check_split<gemma4>(moe + "/tiny-f32.gguf", oracle_case(moe, f32));
  check_split<gemma4>(moe, oracle_case(moe, f32));
}

TEST_CASE("TP: tiny GLM-4 (biased q/k/v, merged gate|up in GGUF) split over the ranks") {
  auto const dir = fixtures + "/glm/tiny4";
  check_split<tf::families::glm::glm4>(dir + "/tiny-f32.gguf", oracle_case(dir, 1e-5f));
  check_split<tf::families::glm::glm4>(dir, oracle_case(dir, 1e-5f));
  check_split<tf::families::glm::glm4>(dir + "/tiny-q8_0.gguf", oracle_case(dir, 1e-5f));
}

TEST_CASE("TP: tiny Qwen3-MoE, each rank a slice of every expert") {
  auto const dir = fixtures + "/qwen/tiny_moe";
  check_split<tf::families::qwen::qwen3_moe>(dir + "/tiny-f32.gguf", oracle_case(dir, 1e-5f));
  check_split<tf::families::qwen::qwen3_moe>(dir, oracle_case(dir, 1e-5f));
  // Its experts are 32 wide: 16 columns a rank would cut Q8_0's 32-element blocks.
  auto file = model_file::open(dir + "/tiny-q8_0.gguf");
  using engine = tf::engine<tf::families::qwen::qwen3_moe, cpu>;
  CHECK_THROWS_WITH(engine(file, {64, 16}, {1, tf::dist::tensor_parallel::over(ranks())}),
                    Catch::Contains("not a whole number of 32-element blocks"));
}

TEST_CASE("TP: tiny GLM-4.5 MoE: routed and shared experts sliced, a dense first layer") {
  auto const dir = fixtures + "/glm/tiny45";
  check_split<tf::families::glm::glm4_moe>(dir + "/tiny-f32.gguf", oracle_case(dir, 1e-5f));
  check_split<tf::families::glm::glm4_moe>(dir, oracle_case(dir, 1e-5f));
}

// The hybrids split their attention, MLPs and experts as the others do, and their recurrent
// layers by heads: a rank holds its Gated DeltaNet key heads with the value heads that read them
// (GGUF's tiled value heads as a slice of each block, HF's grouped ones as one run), or its Mamba2
// heads with their groups; the fused input projections, the conv's channels and the per-head
// vectors follow, the output projection is row-parallel, and the state slot holds only its heads.
TEST_CASE("TP: the hybrid families split over the ranks, recurrent heads too") {
  using namespace tf::families;
  auto const q35 = fixtures + "/qwen/tiny35";  // tiled value heads in GGUF, grouped in HF
  check_split<qwen::qwen35>(q35 + "/tiny-f32.gguf", oracle_case(q35, 1e-5f));
  check_split<qwen::qwen35>(q35, oracle_case(q35, 1e-5f));
  auto const q35moe = fixtures + "/qwen/tiny35_moe";  // GGUF's fused gate|up experts
  check_split<qwen::qwen35_moe>(q35moe + "/tiny-f32.gguf", oracle_case(q35moe, 1e-5f));
  check_split<qwen::qwen35_moe>(q35moe, oracle_case(q35moe, 1e-5f));
  auto const next = fixtures + "/qwen/tiny3next";  // flat GGUF projections, interleaved HF ones
  check_split<qwen::qwen3_next>(next + "/tiny-f32.gguf", oracle_case(next, 1e-5f));
  check_split<qwen::qwen3_next>(next, oracle_case(next, 1e-5f));
  auto const h = fixtures + "/nemotron/tiny_h";
  check_split<nemotron::nemotron_h>(h + "/tiny-f32.gguf", oracle_case(h, 1e-5f));
  check_split<nemotron::nemotron_h>(h, oracle_case(h, 1e-5f));
  // Q8_0: each matmul quantizes its input to 8 bits, so a last-bit change in a row-parallel sum
  // may move one quantum (as on the default model); the runs agree until then.
  check_split<nemotron::nemotron_h>(h + "/tiny-q8_0.gguf", oracle_case(h, 0.05f));
  // Relu² experts and a shared expert sliced, with and without the latent projections.
  for (auto const* dir : {"/nemotron/tiny_h_moe", "/nemotron/tiny_h_latent"}) {
    check_split<nemotron::nemotron_h>(fixtures + dir + "/tiny-f32.gguf",
                                      oracle_case(fixtures + dir, 1e-5f));
    check_split<nemotron::nemotron_h>(fixtures + dir, oracle_case(fixtures + dir, 1e-5f));
  }
  // Tiled value heads put a rank's output columns in runs of one 16-wide head: not whole Q8_0
  // blocks, so the split is refused with a message rather than cut mid-block.
  using engine = tf::engine<qwen::qwen35, cpu>;
  auto file = model_file::open(fixtures + "/qwen/tiny35/tiny-q8_0.gguf");
  CHECK_THROWS_WITH(
      engine(file, {64, 16, tf::kv_dtype::f32, 1}, {1, tf::dist::tensor_parallel::over(ranks())}),
      Catch::Contains("not a whole number of 32-element blocks"));
}

TEST_CASE("TP: the default model (Gemma 3 270M Q4_K_M) split over the ranks") {
  // "The capital of France is" and its llama.cpp continuation's first tokens (llama_goldens.json).
  // The tolerance is the model's, not the split's: each matmul quantizes its input to 8 bits
  // (Q8_K / Q8_0), so a last-bit change in a row-parallel sum can move one quantized input by a
  // step, and 18 layers of a Q4_K_M model carry that to logits of O(20) as up to ~1.2 (measured;
  // the runs agree bit for bit until the first such flip). Greedy tokens still agree here.
  case_params c{
      {{2, 818, 5279, 529, 7001, 563}, {2, 818, 5279, 529, 7001, 563, 506, 5279, 529}}, 8, 1.5f};
  check_split<tf::families::gemma::gemma3>(tf::model::default_model_path().string(), c);
  // Its one KV head stays whole on every rank; the tied head is counted once.
  check_weight_share<tf::families::gemma::gemma3>(tf::model::default_model_path().string(),
                                                  {"attn_q", "ffn_gate", "ffn_up"},
                                                  {"attn_output", "ffn_down"});
}

int main(int argc, char** argv) {
  return tf::test::split::run(argc, argv);
}
