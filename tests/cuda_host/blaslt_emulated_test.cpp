// backend::cuda's cuBLASLt path (cuda_matmul::cublaslt, include/tf/backend/cuda/blaslt.hpp) on the
// CPU, without a GPU: the real tf::engine<Family, backend::cuda> over the fake CUDA runtime, the
// fake cuBLASLt (fake_cublaslt.hpp: descriptors read as cuBLASLt defines them, each sum in k
// order) and the host launchers. Over F32 GGUF fixtures, F16 and BF16 copies of the HF fixtures
// (written by this test) and Q8_0 GGUF fixtures (dequantized f16 tiles): the last prompt logits
// against the CPU backend's on the same file within a stated tolerance, greedy tokens equal; a
// prompt in chunks of 1, 7 or whole and 8 batched rows give the same bits as whole and solo; every
// M a weight runs at uses its one algorithm with split-K 1 and no reduction; the workspace each
// call gets is the one the budget counts; cuBLASLt's errors reach the caller with their names.
#include <tests/common/last_logits.hpp>
#include <tests/cuda_host/emulated_engine.hpp>
#include <tests/cuda_host/fake_cuda_runtime.hpp>
#include <tests/cuda_host/host_launchers.hpp>

#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cpu/quantize.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/backend/cuda.hpp>
#include <tf/engine.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace fs = std::filesystem;
using tf::backend::cpu;
using tf::backend::cuda;
using tf::backend::cuda_matmul;
using tf::test::last_logits;

using namespace tf::test::emulated;
using tf::test::compare;

namespace {

fs::path fixture(std::string const& rel) {
  return fs::path(TF_FIXTURES_DIR) / rel;
}

// A copy of the HF fixture folder `rel` with every F32 tensor rounded to `dtype` (F16 or BF16),
// written once per run under the build folder.
fs::path converted(std::string const& rel, std::string const& dtype) {
  auto const src = fixture(rel);
  auto dir = fs::path(TF_BINARY_DIR) / "blaslt_fixtures" / (rel + "-" + dtype);
  fs::create_directories(dir);
  for (auto const& e : fs::directory_iterator(src))
    if (e.path().extension() == ".json")
      fs::copy_file(e.path(), dir / e.path().filename(), fs::copy_options::overwrite_existing);
  std::ifstream in(src / "model.safetensors", std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string head(n, '\0');
  in.read(head.data(), static_cast<std::streamsize>(n));
  std::vector<char> const data((std::istreambuf_iterator<char>(in)), {});
  auto header = nlohmann::json::parse(head);
  // Tensors in their data order, each rewritten at its new offset.
  std::vector<std::pair<std::uint64_t, std::string>> order;
  for (auto const& [name, t] : header.items())
    if (name != "__metadata__") order.emplace_back(t.at("data_offsets").at(0), name);
  std::sort(order.begin(), order.end());
  std::vector<char> out;
  for (auto const& [begin, name] : order) {
    auto& t = header[name];
    auto const end = t.at("data_offsets").at(1).get<std::uint64_t>();
    auto const at = out.size();
    if (t.at("dtype") == "F32") {
      for (std::uint64_t i = begin; i < end; i += 4) {
        float f;
        std::memcpy(&f, data.data() + i, 4);
        std::uint16_t const h =
            dtype == "F16" ? tf::kernels::cpu::fp32_to_fp16(f) : tf::kernels::cpu::fp32_to_bf16(f);
        out.insert(out.end(), reinterpret_cast<char const*>(&h),
                   reinterpret_cast<char const*>(&h) + 2);
      }
      t["dtype"] = dtype;
    } else {
      out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(begin),
                 data.begin() + static_cast<std::ptrdiff_t>(end));
    }
    t["data_offsets"] = {at, out.size()};
  }
  auto const text = header.dump();
  std::ofstream o(dir / "model.safetensors", std::ios::binary | std::ios::trunc);
  std::uint64_t const len = text.size();
  o.write(reinterpret_cast<char const*>(&len), 8);
  o.write(text.data(), static_cast<std::streamsize>(len));
  o.write(out.data(), static_cast<std::streamsize>(out.size()));
  return dir;
}

// The model files of these tests, each with the relative tolerance its logits keep against the
// CPU backend's on the same file (of the largest |logit|, plus 1e-4).
struct model_case {
  fs::path path;
  std::string name;
  float rel_tol;
};
std::vector<model_case> const& cases() {
  // F32: only the sums' order differs. F16 / BF16 weights: the activations are rounded to the
  // weight's type (2^-11 / 2^-8 relative each) before cuBLASLt. Q8_0: the CPU quantizes its
  // activations to Q8_0 where cuBLASLt takes them rounded to f16 (the own kernel's bound).
  static std::vector<model_case> const c = {
      {fixture("gemma/tiny/tiny-f32.gguf"), "gemma F32", 1e-4f},
      {fixture("nemotron/tiny_h_moe/tiny-f32.gguf"), "nemotron-h MoE F32", 1e-4f},
      {converted("qwen/tiny", "F16"), "qwen3 F16", 5e-3f},
      {converted("gemma/tiny", "F16"), "gemma F16", 5e-3f},
      {converted("qwen/tiny", "BF16"), "qwen3 BF16", 3e-2f},
      {converted("qwen/tiny35", "BF16"), "qwen3.5 BF16", 3e-2f},
      {fixture("gemma/tiny/tiny-q8_0.gguf"), "gemma Q8_0", 4e-2f},
      {fixture("qwen/tiny35_moe/tiny-q8_0.gguf"), "qwen3.5 MoE Q8_0", 4e-2f},
  };
  return c;
}

std::vector<std::int32_t> prompt_of(fs::path const& path) {
  auto const dir = fs::is_directory(path) ? path : path.parent_path();
  nlohmann::json j;
  std::ifstream(dir / "expected.json") >> j;
  return j.at("prompts").at(0).at("prompt").get<std::vector<std::int32_t>>();
}

tf::open_options options(cuda_matmul m, tf::kv_dtype kv = tf::kv_dtype::f32) {
  tf::open_options o;
  o.kv = kv;
  o.context = 128;
  o.page_tokens = 16;
  o.load = tf::model::load_mode::map;
  o.cuda_matmul = m;
  return o;
}

// Resets the fake cuBLASLt's knobs and record on entry and exit.
struct fresh_fake {
  fresh_fake() { reset(); }
  ~fresh_fake() { reset(); }
  static void reset() {
    fake_cublaslt::config() = {};
    fake_cublaslt::calls().clear();
    fake_cublaslt::heuristic_limits().clear();
  }
};

// A Q8_0 host matrix of rows x cols with values that vary by row and column.
struct q8_matrix {
  std::vector<tf::kernels::cpu::block_q8_0> blocks;
  tf::backend::host_matrix m;
  q8_matrix(std::int64_t rows, std::int64_t cols) {
    blocks.resize(static_cast<std::size_t>(rows * cols / 32));
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c)
        row[static_cast<std::size_t>(c)] =
            std::sin(0.37f * static_cast<float>(r) + 0.011f * static_cast<float>(c));
      tf::kernels::cpu::quantize_row_q8_0(
          row.data(), blocks.data() + static_cast<std::size_t>(r * cols / 32), cols);
    }
    m.type = tf::model::tensor_type::q8_0;
    m.rows = rows;
    m.cols = cols;
    m.data = reinterpret_cast<std::byte const*>(blocks.data());
    m.row_bytes = static_cast<std::uint64_t>(cols / 32 * 34);
  }
};

cuda::buffer device_rows(std::vector<float> const& host, std::int64_t rows, std::int64_t cols) {
  cuda::buffer b;
  b.values.upload(host.data(), host.size());
  b.rows = rows;
  b.cols = cols;
  return b;
}

std::vector<float> host_of(cuda::buffer const& b) {
  std::vector<float> h(static_cast<std::size_t>(b.rows * b.cols));
  REQUIRE(cudaMemcpy(h.data(), b.data(), h.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

}  // namespace

TEST_CASE("cuBLASLt mode allocates exactly the scratch the budget counts, own mode none") {
  fresh_fake fake;
  std::size_t const before = fake_cuda::live_bytes();
  std::size_t const objects = fake_cublaslt::live_objects();
  {
    cuda own;
    CHECK(own.blaslt() == nullptr);
    CHECK(fake_cuda::live_bytes() - before == cuda::scratch_bytes({}));
    CHECK(cuda::scratch_bytes({}) == 0);
  }
  {
    tf::backend::cuda_options const o{0, cuda_matmul::cublaslt};
    cuda be(o);
    REQUIRE(be.blaslt() != nullptr);
    CHECK(cuda::scratch_bytes(o) == (std::uint64_t{64} << 20));
    CHECK(fake_cuda::live_bytes() - before == cuda::scratch_bytes(o));
    CHECK(fake_cuda::on_device(be.blaslt()->workspace(), be.blaslt()->workspace_size()));
  }
  CHECK(fake_cuda::live_bytes() == before);
  CHECK(fake_cublaslt::live_objects() == objects);  // handle and descriptors destroyed
  auto const d = tf::backend::cuda_parts::query_device(0);
  CHECK_THAT(cuda::summary(d, cuda_matmul::cublaslt),
             Catch::Matchers::Contains("matmul: cuBLASLt at every batch size") &&
                 Catch::Matchers::Contains("split-K 1"));
  CHECK_THAT(cuda::summary(d), Catch::Matchers::Contains("matmul: one warp per output"));
  CHECK(tf::backend::parse_cuda_matmul("cublaslt") == cuda_matmul::cublaslt);
  CHECK_THROWS_WITH(tf::backend::parse_cuda_matmul("bogus"),
                    "tf: --cuda-matmul wants own or cublaslt, got 'bogus'");
}

TEST_CASE("cuBLASLt mode on the emulated CUDA backend: the CPU's logits, greedy tokens") {
  fresh_fake fake;
  std::size_t const before = fake_cuda::live_bytes();
  for (auto const& c : cases()) {
    INFO(c.name << ": " << c.path.string());
    auto const prompt = prompt_of(c.path);
    auto on_cpu = tf::open<tf::families::builtin, cpu>(c.path, options(cuda_matmul::own));
    auto on_gpu = tf::open<tf::families::builtin, cuda>(c.path, options(cuda_matmul::cublaslt));
    fake_cublaslt::calls().clear();
    auto const a = last_logits(*on_cpu, prompt);
    auto const b = last_logits(*on_gpu, prompt);
    CHECK_FALSE(fake_cublaslt::calls().empty());  // the matmuls went through cuBLASLt
    auto const [d, top] = compare(a, b);
    INFO("max |cpu - cuda| = " << d << " of max |logit| " << top);
    CHECK(d <= c.rel_tol * top + 1e-4f);
    CHECK(generate(*on_gpu, prompt, 6) == generate(*on_cpu, prompt, 6));
  }
  CHECK(fake_cuda::live_bytes() == before);
}

TEST_CASE("cuBLASLt mode: a prompt in chunks of 1, 7 or whole gives the same bits") {
  fresh_fake fake;
  for (auto const& c : cases()) {
    for (auto const kv : {tf::kv_dtype::f32, tf::kv_dtype::f16}) {
      INFO(c.name << (kv == tf::kv_dtype::f16 ? ", f16 KV" : ", f32 KV"));
      auto const prompt = prompt_of(c.path);
      auto m = tf::open<tf::families::builtin, cuda>(c.path, options(cuda_matmul::cublaslt, kv));
      auto const whole = last_logits(*m, prompt);
      CHECK(same_bits(last_logits(*m, prompt, 1), whole));
      CHECK(same_bits(last_logits(*m, prompt, 7), whole));
    }
  }
}

TEST_CASE("cuBLASLt mode: 8 rows batched give each row's solo logits bit for bit") {
  fresh_fake fake;
  for (auto const& c : cases()) {
    INFO(c.name);
    constexpr int R = 8, page = 8;
    tf::kv_shape const kv{R * 6, page, tf::kv_dtype::f16, R};
    std::vector<std::vector<std::int32_t>> pages(R), first(R), second(R);
    std::int64_t vocab = 0;
    with_engine<cuda>(c.path, kv, {0, cuda_matmul::cublaslt},
                      [&](auto& e) { vocab = e.vocab_size(); });
    for (int r = 0; r < R; ++r) {
      auto const i = static_cast<std::size_t>(r);
      for (int p = 0; p < 6; ++p) pages[i].push_back(r + R * p);
      first[i] = tokens(r, 3 + 5 * r, vocab);
      second[i] = tokens(100 + r, 1 + r % 3, vocab);
    }
    auto const step_rows = [&](int phase) {
      std::vector<tf::batch_row> rows;
      for (int r = 0; r < R; ++r) {
        auto const i = static_cast<std::size_t>(r);
        if (phase == 0)
          rows.push_back({first[i], 0, pages[i], false, r});
        else
          rows.push_back(
              {second[i], static_cast<std::int32_t>(first[i].size()), pages[i], r % 2 == 1, r});
      }
      return rows;
    };
    check_batched_equals_solo<cuda>(c.path, kv, {0, cuda_matmul::cublaslt}, 2, step_rows);
  }
}

TEST_CASE(
    "cuBLASLt mode: every M a weight runs at uses its one algorithm, split-K 1, and the "
    "counted workspace") {
  fresh_fake fake;
  // First the heuristic offers a split-K algorithm ahead of the others (the backend forces it to
  // one pass); then only one that needs workspace (the backend takes it and passes its own).
  for (bool const split_offered : {true, false}) {
    for (auto const& c : cases()) {
      INFO(c.name << (split_offered ? ", split-K offered first" : ", only a workspace algorithm"));
      fresh_fake::reset();
      fake_cublaslt::config().offer_split_k = split_offered;
      fake_cublaslt::config().offer_plain = split_offered;
      auto const prompt = prompt_of(c.path);
      tf::kv_shape const kv{8, 16, tf::kv_dtype::f32, 1};
      void const* counted = nullptr;
      with_engine<cuda>(c.path, kv, {0, cuda_matmul::cublaslt}, [&](auto& e) {
        counted = e.backend().blaslt()->workspace();
        auto const pages = tf::test::pages_in_order(kv.num_pages);
        // The prompt whole, then again in chunks of 7, then one more token: M = whole, 7, rest, 1.
        for (std::size_t chunk : {prompt.size(), std::size_t{7}}) {
          for (std::size_t at = 0; at < prompt.size(); at += chunk) {
            std::span<std::int32_t const> const part(prompt.data() + at,
                                                     std::min(chunk, prompt.size() - at));
            tf::batch_row const row{part, static_cast<std::int32_t>(at), pages, false, 0};
            (void)run(e, {&row, 1});
          }
        }
        std::vector<std::int32_t> const next{prompt.front()};
        tf::batch_row const row{next, static_cast<std::int32_t>(prompt.size()), pages, false, 0};
        (void)run(e, {&row, 1});
      });
      for (auto const limit : fake_cublaslt::heuristic_limits())
        CHECK(limit == tf::backend::cuda_parts::blaslt_workspace_bytes);
      using shape_key = std::tuple<void const*, std::uint64_t, std::uint64_t>;
      std::map<shape_key, std::set<std::int32_t>> algos;
      std::map<shape_key, std::set<std::uint64_t>> ms;
      for (auto const& call : fake_cublaslt::calls()) {
        CHECK(call.algo.split_k == 1);
        CHECK(call.algo.reduction == CUBLASLT_REDUCTION_SCHEME_NONE);
        CHECK(call.algo.id ==
              (split_offered ? fake_cublaslt::split_k_algo : fake_cublaslt::workspace_algo));
        auto const key = std::make_tuple(call.a, call.m, call.k);
        algos[key].insert(call.algo.id);
        ms[key].insert(call.n);
        CHECK(call.workspace == counted);
        CHECK(call.workspace_bytes == tf::backend::cuda_parts::blaslt_workspace_bytes);
      }
      REQUIRE_FALSE(algos.empty());
      for (auto const& [key, ids] : algos) CHECK(ids.size() == 1);
      bool several = false;
      for (auto const& [key, seen] : ms)
        several = several || (seen.count(1) && seen.count(7) && seen.count(prompt.size()));
      CHECK(several);  // a weight ran at M = 1, 7 and the whole prompt
    }
  }
}

TEST_CASE("cuBLASLt mode: a quantized weight runs slab by slab through the tile") {
  fresh_fake fake;
  // 4160 rows of 4096: the 32 MiB f16 tile holds 4096 of them, so two slabs of 4096 and 64 rows.
  constexpr std::int64_t rows = 4160, cols = 4096;
  q8_matrix const q(rows, cols);
  cuda own;
  cuda lt({0, cuda_matmul::cublaslt});
  auto const w_own = own.upload(q.m);
  auto const w_lt = lt.upload(q.m);
  REQUIRE(w_lt.plan);
  CHECK(w_lt.plan->slab_rows == 4096);
  CHECK(w_lt.plan->shapes.size() == 2);
  for (std::int64_t const n : {1, 5}) {
    INFO(n << " rows");
    std::vector<float> x(static_cast<std::size_t>(n * cols));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.013f * static_cast<float>(i));
    auto const xb = device_rows(x, n, cols);
    cuda::buffer y_own, y_lt;
    fake_cublaslt::calls().clear();
    own.matmul(w_own, xb, y_own);
    lt.matmul(w_lt, xb, y_lt);
    REQUIRE(fake_cublaslt::calls().size() == 2);
    CHECK(fake_cublaslt::calls()[0].m == 4096);
    CHECK(fake_cublaslt::calls()[1].m == 64);
    CHECK(fake_cublaslt::calls()[0].a == lt.blaslt()->tile());
    CHECK(fake_cublaslt::calls()[1].d ==
          static_cast<void const*>(y_lt.data() + 4096));  // the slab's first output column
    auto const a = host_of(y_own), b = host_of(y_lt);
    // Against the own kernel: the weights and the activations rounded to f16, 2^-11 each.
    double worst = 0.0;
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t r = 0; r < rows; ++r) {
        double bound = 0.0;
        std::vector<float> wr(static_cast<std::size_t>(cols));
        if (r % 97 != 0 && r != rows - 1) continue;  // a sample of rows, both slabs
        tf::backend::cpu_parts::matrix(q.m).dequantize_row(r, wr.data());
        for (std::int64_t k = 0; k < cols; ++k)
          bound += std::fabs(static_cast<double>(wr[static_cast<std::size_t>(k)]) *
                             x[static_cast<std::size_t>(t * cols + k)]);
        auto const i = static_cast<std::size_t>(t * rows + r);
        double const err = std::fabs(static_cast<double>(a[i]) - b[i]);
        CHECK(err <= 2.0 * 0x1p-11 * bound + 1e-5);
        worst = std::max(worst, err / (bound + 1e-30));
      }
    INFO("worst |own - cublaslt| / sum |w x| = " << worst);
    CHECK(worst > 0.0);  // the f16 rounding shows
  }
}

TEST_CASE("cuBLASLt mode: cuBLASLt's errors reach the caller with their names") {
  using Catch::Matchers::Contains;
  fresh_fake fake;
  std::size_t const objects = fake_cublaslt::live_objects();
  fake_cublaslt::config().fail_next_create = CUBLAS_STATUS_NOT_INITIALIZED;
  CHECK_THROWS_WITH(
      cuda({0, cuda_matmul::cublaslt}),
      Contains("cuBLASLt cublasLtCreate failed") && Contains("(CUBLAS_STATUS_NOT_INITIALIZED)"));
  cuda be({0, cuda_matmul::cublaslt});
  std::vector<float> w(64 * 32, 0.5f);
  tf::backend::host_matrix const m{tf::model::tensor_type::f32, 64, 32,
                                   reinterpret_cast<std::byte const*>(w.data()), 32 * 4};
  fake_cublaslt::config().fail_next_heuristic = CUBLAS_STATUS_NOT_SUPPORTED;
  CHECK_THROWS_WITH(be.upload(m), Contains("cublasLtMatmulAlgoGetHeuristic failed") &&
                                      Contains("(CUBLAS_STATUS_NOT_SUPPORTED)"));
  auto const d = be.upload(m);
  auto const x = device_rows(std::vector<float>(3 * 32, 1.0f), 3, 32);
  cuda::buffer y;
  fake_cublaslt::config().fail_next_matmul = CUBLAS_STATUS_EXECUTION_FAILED;
  CHECK_THROWS_WITH(be.matmul(d, x, y), Contains("cublasLtMatmul failed") &&
                                            Contains("(CUBLAS_STATUS_EXECUTION_FAILED)"));
  be.matmul(d, x, y);
  CHECK(host_of(y) == std::vector<float>(3 * 64, 16.0f));
  // The algorithm chosen at bind time fails its check at some M: the error names the weight and
  // M; the backend never switches to another kernel.
  fake_cublaslt::config().reject_n = 2;
  auto const x2 = device_rows(std::vector<float>(2 * 32, 1.0f), 2, 32);
  CHECK_THROWS_WITH(be.matmul(d, x2, y),
                    Contains("cannot run the algorithm chosen for the F32 weight of 64 x 32") &&
                        Contains("at 2 rows") && Contains("CUBLAS_STATUS_NOT_SUPPORTED"));
  // No candidate passes its check at the reference M: the bind fails naming the weight.
  fake_cublaslt::config() = {};
  fake_cublaslt::config().reject_n = tf::backend::cuda_parts::blaslt_reference_rows;
  std::vector<float> w2(48 * 32, 0.5f);
  tf::backend::host_matrix const m2{tf::model::tensor_type::f32, 48, 32,
                                    reinterpret_cast<std::byte const*>(w2.data()), 32 * 4};
  CHECK_THROWS_WITH(be.upload(m2), Contains("cuBLASLt offers no algorithm with split-K 1 and no "
                                            "reduction for the F32 weight of 48 x 32"));
  fake_cublaslt::config() = {};
  CHECK(fake_cublaslt::live_objects() > objects);  // the backend's handle and plans
}
