// backend::cuda's host code on the CPU, without a GPU: the real tf::engine<Family, backend::cuda>
// over a fake CUDA runtime (host memory, every allocation and copy checked) and host copies of
// the kernels in their order (host_launchers.hpp). Over every tiny fixture (GGUF F32, Q8_0 and
// HF folders): the last prompt logits are within 1e-4 of the largest CPU-backend logit with an
// f32 KV (5e-3 f16 KV, 4e-2 Q8_0 weights), plus 1e-4, and the greedy tokens are transformers';
// a prompt fed in chunks of 1, 7 or whole gives the same bits; 8 rows batched give each row's
// solo logits bit for bit; a copied page and state slot continue as the originals; MoE picks
// equal the CPU backend's; the runtime's and the launchers' errors reach the caller naming them.
#include <families/gemma/gemma4.hpp>
#include <families/mtp_heads.hpp>
#include <tests/common/last_logits.hpp>
#include <tests/cuda_host/emulated_engine.hpp>
#include <tests/cuda_host/fake_cuda_runtime.hpp>
#include <tests/cuda_host/host_launchers.hpp>

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
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace fs = std::filesystem;
using tf::backend::cpu;
using tf::backend::cuda;
using tf::test::last_logits;

using namespace tf::test::emulated;
using tf::test::compare;

namespace {

std::vector<std::string> fixture_files() {
  return {"gemma/tiny/tiny-f32.gguf",
          "gemma/tiny/tiny-q8_0.gguf",
          "qwen/tiny/tiny-f32.gguf",
          "qwen/tiny_moe/tiny-f32.gguf",
          "glm/tiny4/tiny-f32.gguf",
          "glm/tiny45/tiny-f32.gguf",
          "qwen/tiny35/tiny-f32.gguf",
          "qwen/tiny35_moe/tiny-q8_0.gguf",
          "nemotron/tiny_h/tiny-f32.gguf",
          "nemotron/tiny_h_moe/tiny-f32.gguf",
          "nemotron/tiny_h_latent/tiny-f32.gguf",
          "qwen/tiny3next/tiny-f32.gguf",
          "gemma/tiny4_e/tiny-f32.gguf",
          "gemma/tiny",
          "gemma/tiny4_e",
          "gemma/tiny4_moe",
          "qwen/tiny",
          "qwen/tiny_moe",
          "glm/tiny4",
          "glm/tiny45",
          "qwen/tiny35",
          "qwen/tiny35_moe",
          "nemotron/tiny_h",
          "nemotron/tiny_h_moe",
          "nemotron/tiny_h_latent",
          "qwen/tiny3next"};
}

fs::path fixture(std::string const& rel) {
  return fs::path(TF_FIXTURES_DIR) / rel;
}

bool quantized(std::string const& rel) {
  return rel.find("q8_0") != std::string::npos;
}

// The fixture's first prompt and transformers' greedy continuation of it.
struct expectation {
  std::vector<std::int32_t> prompt, greedy;
};
expectation expected(fs::path const& path) {
  auto const dir = fs::is_directory(path) ? path : path.parent_path();
  nlohmann::json j;
  std::ifstream(dir / "expected.json") >> j;
  auto const& c = j.at("prompts").at(0);
  return {c.at("prompt").get<std::vector<std::int32_t>>(),
          c.at("greedy").get<std::vector<std::int32_t>>()};
}

tf::open_options options(tf::kv_dtype kv) {
  tf::open_options o;
  o.kv = kv;
  o.context = 128;
  o.page_tokens = 16;  // prompts and continuations cross pages
  return o;
}

}  // namespace

TEST_CASE("the fake device: its name, memory and errors reach the caller as tf::error") {
  using Catch::Matchers::Contains;
  cuda be;
  CHECK(cuda::label(be.device()) == "CUDA sm_90 device 0 (tf host emulation)");
  CHECK_FALSE(be.device().integrated);
  CHECK(be.device().memory.total_bytes == fake_cuda::total_bytes);
  CHECK_THROWS_WITH(cuda(tf::backend::cuda_options{3}),
                    Contains("CUDA device 3 does not exist (1 device visible)"));

  fake_cuda::config().devices = 0;
  CHECK(tf::backend::cuda_parts::device_count() == 0);
  CHECK(cudaGetLastError() == cudaSuccess);  // device_count() left no sticky error behind
  CHECK_THROWS_WITH(cuda(), Contains("CUDA device 0 does not exist (0 devices visible)"));
  fake_cuda::config().devices = 1;

  fake_cuda::config().fail_next_malloc = true;
  CHECK_THROWS_WITH(be.upload(std::vector<float>(8, 1.0f)),
                    Contains("CUDA cudaMalloc failed: out of memory (cudaErrorMemoryAllocation)"));
  auto const v = be.upload(std::vector<float>(8, 1.0f));
  CHECK(fake_cuda::on_device(v.data(), 8 * sizeof(float)));
}

TEST_CASE("a launcher's error for a shape its kernel cannot take reaches the backend's caller") {
  using Catch::Matchers::Contains;
  cuda be;
  // A head of 520 passes the backend's checks; the attention kernel takes at most 512.
  tf::kv_shape const shape{4, 8, tf::kv_dtype::f32, 0};
  auto kv = be.make_kv_store(shape, {1, 1, 520});
  std::vector<std::int32_t> const toks{1}, pages{0};
  tf::batch_row const row{toks, 0, pages};
  auto const& s = be.begin({&row, 1}, kv, 10);
  cuda::buffer q, out;
  q.values.assign_zero(520);
  q.rows = 1;
  q.cols = 520;
  be.kv_write(s, kv, 0, q, q);
  CHECK_THROWS_WITH(be.attend(s, kv, 0, q, out, {1, 1, 520}),
                    Contains("CUDA attend") && Contains("at most 512"));
  CHECK_THROWS_WITH(kv.copy_page(0, 4), Contains("outside the store's 4 pages"));
}

TEST_CASE("every tiny fixture on the emulated CUDA backend: the CPU's logits, greedy tokens") {
  std::size_t const before = fake_cuda::live_bytes();
  for (auto const& rel : fixture_files()) {
    auto const path = fixture(rel);
    INFO(path.string());
    REQUIRE(fs::exists(path));
    auto const want = expected(path);
    auto on_cpu = tf::open<tf::families::builtin, cpu>(path, options(tf::kv_dtype::f32));
    auto const a = last_logits(*on_cpu, want.prompt);
    for (auto const kv : {tf::kv_dtype::f32, tf::kv_dtype::f16}) {
      bool const f16 = kv == tf::kv_dtype::f16;
      INFO((f16 ? "f16 KV" : "f32 KV"));
      auto o = options(kv);
      o.load = tf::model::load_mode::map;
      auto on_gpu = tf::open<tf::families::builtin, cuda>(path, o);
      CHECK(on_gpu->backend() == "cuda");
      auto const b = last_logits(*on_gpu, want.prompt);
      auto const d = compare(a, b);
      // Only the sums' order differs from the CPU's with f32 KV; f16 KV rounds K and V; against
      // Q8_0 weights the CPU quantizes activations to Q8_0 where the CUDA matmul keeps f32.
      float const rel_tol = quantized(rel) ? 4e-2f : f16 ? 5e-3f : 1e-4f;
      INFO("max |cpu - cuda| = " << d.diff << " of max |logit| " << d.top);
      CHECK(d.diff <= rel_tol * d.top + 1e-4f);
      CHECK(generate(*on_gpu, want.prompt, want.greedy.size()) == want.greedy);
    }
  }
  CHECK(fake_cuda::live_bytes() == before);  // every engine gave its device memory back
}

TEST_CASE("on the emulated CUDA backend, a prompt in chunks of 1, 7 or whole gives the same bits") {
  for (auto const& rel : fixture_files()) {
    if (fs::is_directory(fixture(rel))) continue;  // the GGUF files cover every forward
    for (auto const kv : {tf::kv_dtype::f32, tf::kv_dtype::f16}) {
      INFO(rel << (kv == tf::kv_dtype::f16 ? ", f16 KV" : ", f32 KV"));
      auto const prompt = expected(fixture(rel)).prompt;
      auto m = tf::open<tf::families::builtin, cuda>(fixture(rel), options(kv));
      auto const whole = last_logits(*m, prompt);
      CHECK(same_bits(last_logits(*m, prompt, 1), whole));
      CHECK(same_bits(last_logits(*m, prompt, 7), whole));
    }
  }
}

TEST_CASE("on the emulated CUDA backend, 8 rows batched give each row's solo logits bit for bit") {
  for (std::string rel : {"gemma/tiny/tiny-f32.gguf", "gemma/tiny/tiny-q8_0.gguf",
                          "qwen/tiny35/tiny-f32.gguf", "nemotron/tiny_h_moe/tiny-f32.gguf"}) {
    for (auto const dtype : {tf::kv_dtype::f32, tf::kv_dtype::f16}) {
      INFO(rel << (dtype == tf::kv_dtype::f16 ? ", f16 KV" : ", f32 KV"));
      constexpr int R = 8, page = 8;
      tf::kv_shape const kv{R * 6, page, dtype, R};
      // Row r: its own slot and pages r, r + 8, ... (interleaved with the other rows'); a prompt
      // of 3 + 5 r tokens; then 4 more tokens, or, every third row, a new 6-token prompt from 0.
      std::vector<std::vector<std::int32_t>> pages(R), first(R), second(R);
      std::vector<std::int32_t> restart_at(R);
      std::int64_t vocab = 0;
      with_engine<cuda>(fixture(rel), kv, {}, [&](auto& e) { vocab = e.vocab_size(); });
      for (int r = 0; r < R; ++r) {
        auto const i = static_cast<std::size_t>(r);
        for (int p = 0; p < 6; ++p) pages[i].push_back(r + R * p);
        first[i] = tokens(r, 3 + 5 * r, vocab);
        bool const restart = r % 3 == 0;
        second[i] = tokens(100 + r, restart ? 6 : 4, vocab);
        restart_at[i] = restart ? 0 : static_cast<std::int32_t>(first[i].size());
      }
      auto const step_rows = [&](int phase) {
        std::vector<tf::batch_row> rows;
        for (int r = 0; r < R; ++r) {
          auto const i = static_cast<std::size_t>(r);
          if (phase == 0)
            rows.push_back({first[i], 0, pages[i], false, r});
          else
            rows.push_back({second[i], restart_at[i], pages[i], r % 2 == 1, r});
        }
        return rows;
      };
      check_batched_equals_solo<cuda>(fixture(rel), kv, {}, 2, step_rows);
    }
  }
}

TEST_CASE("on the emulated CUDA backend, a copied page and state slot continue as the originals") {
  for (std::string rel : {"gemma/tiny/tiny-f32.gguf", "qwen/tiny35/tiny-f32.gguf",
                          "qwen/tiny35_moe/tiny-q8_0.gguf", "nemotron/tiny_h/tiny-f32.gguf"}) {
    for (auto const dtype : {tf::kv_dtype::f32, tf::kv_dtype::f16}) {
      INFO(rel << (dtype == tf::kv_dtype::f16 ? ", f16 KV" : ", f32 KV"));
      with_engine<cuda>(fixture(rel), {16, 8, dtype, 4}, {}, [&](auto& e) {
        constexpr bool hybrid = std::remove_reference_t<decltype(e)>::has_state;
        auto const prefix = tokens(1, 12, e.vocab_size());
        auto const more = tokens(2, 5, e.vocab_size());
        // Pages: the original's, the copy's, and two controls' (page 12 never written, page 4 a
        // copy); slots: the original's 0, 1 never written, the copies 2 and 3.
        std::vector<std::int32_t> const kept{0, 1, 2, 3}, copy{0, 9, 10, 11},
            no_page{0, 12, 13, 14}, page_only{0, 4, 5, 6};
        tf::batch_row const start{prefix, 0, kept, false, 0};
        (void)run(e, {&start, 1});
        // Page 1 holds positions 8..11 of 16; a copy shares page 0 and takes its own page 1.
        e.copy_page(1, 9);
        e.copy_page(1, 4);
        if constexpr (hybrid) {
          e.copy_state(0, 2);
          e.copy_state(0, 3);
        } else {
          CHECK_THROWS_WITH(e.copy_state(0, 2), Catch::Matchers::Contains("keeps no recurrent"));
        }
        // The original continues first, overwriting page 1 and slot 0 past the copy.
        tf::batch_row const original{more, 12, kept, true, 0};
        auto const want = run(e, {&original, 1});
        tf::batch_row const copied{more, 12, copy, true, hybrid ? 2 : 0};
        CHECK(same_bits(run(e, {&copied, 1}), want));
        // Without either copy the continuation is another.
        tf::batch_row const without_page{more, 12, no_page, true, hybrid ? 3 : 0};
        CHECK_FALSE(same_bits(run(e, {&without_page, 1}), want));
        if constexpr (hybrid) {
          tf::batch_row const without_state{more, 12, page_only, true, 1};
          CHECK_FALSE(same_bits(run(e, {&without_state, 1}), want));
        }
      });
    }
  }
}

TEST_CASE("on the emulated CUDA backend, MoE layers pick the CPU backend's experts") {
  for (std::string rel :
       {"qwen/tiny_moe/tiny-f32.gguf", "glm/tiny45/tiny-f32.gguf", "qwen/tiny35_moe/tiny-f32.gguf",
        "qwen/tiny35_moe/tiny-q8_0.gguf", "nemotron/tiny_h_moe/tiny-f32.gguf",
        "nemotron/tiny_h_latent/tiny-f32.gguf"}) {
    INFO(rel);
    auto const want = expected(fixture(rel));
    tf::kv_shape const kv{8, 16, tf::kv_dtype::f32, 1};
    auto const routes_of = [&]<class B>() {
      std::vector<std::vector<std::int32_t>> routes;
      with_engine<B>(fixture(rel), kv, {}, [&](auto& e) {
        e.backend().record_routes(true);
        auto const pages = tf::test::pages_in_order(kv.num_pages);
        tf::batch_row const prompt{want.prompt, 0, pages, false, 0};
        (void)run(e, {&prompt, 1});
        // Three decode steps on transformers' tokens.
        for (std::size_t i = 0; i < 3; ++i) {
          tf::batch_row const next{std::span(want.greedy.data() + i, 1),
                                   static_cast<std::int32_t>(want.prompt.size() + i), pages, false,
                                   0};
          (void)run(e, {&next, 1});
        }
        routes = e.backend().routes();
      });
      return routes;
    };
    auto const on_cpu = routes_of.template operator()<cpu>();
    auto const on_gpu = routes_of.template operator()<cuda>();
    REQUIRE_FALSE(on_cpu.empty());
    CHECK(on_gpu == on_cpu);
  }
}

// An MTP head reads the target's final hidden states: on CUDA they come back to the host beside
// the logits (capture_hidden), the CPU backend's within the sums' order, and asking for them
// leaves the logits' bits as they are.
TEST_CASE("on the emulated CUDA backend, the forward gives every token's final hidden state") {
  for (std::string rel : {"qwen/tiny35/tiny-f32.gguf", "glm/tiny45/tiny-f32.gguf"}) {
    INFO(rel);
    auto const want = expected(fixture(rel));
    tf::kv_shape const kv{8, 16, tf::kv_dtype::f32, 1};
    auto const pages = tf::test::pages_in_order(kv.num_pages);
    tf::batch_row const prompt{want.prompt, 0, pages, true, 0};
    auto const hidden_of = [&]<class B>(std::vector<float>* plain_logits) {
      std::vector<float> hidden;
      with_engine<B>(fixture(rel), kv, {}, [&](auto& e) {
        hidden.resize(want.prompt.size() * static_cast<std::size_t>(e.hidden_size()));
        std::vector<float> logits(want.prompt.size() * static_cast<std::size_t>(e.vocab_size()));
        e.forward({&prompt, 1}, logits.data(), hidden.data());
        if (plain_logits) CHECK(compare(*plain_logits, logits).diff == 0.0f);
      });
      return hidden;
    };
    std::vector<float> plain;
    with_engine<cuda>(fixture(rel), kv, {}, [&](auto& e) { plain = run(e, {&prompt, 1}); });
    auto const on_gpu = hidden_of.template operator()<cuda>(&plain);
    auto const on_cpu = hidden_of.template operator()<cpu>(nullptr);
    auto const d = compare(on_cpu, on_gpu);
    INFO("max |cpu - cuda| = " << d.diff << " of max |h| " << d.top);
    CHECK(d.top > 0.0f);
    CHECK(d.diff <= 1e-4f * d.top + 1e-5f);  // only the sums' order differs
  }
}

// The MTP heads on CUDA (beside a CUDA target): the CPU head's logits and hidden states within the
// sums' order, for a prompt of positions and then one more step on the head's own state.
TEST_CASE("on the emulated CUDA backend, MTP heads give the CPU head's logits and hidden states") {
  for (std::string rel : {"qwen/tiny35_mtp/tiny-f32.gguf", "qwen/tiny3next_mtp/tiny-f32.gguf",
                          "glm/tiny45_mtp/tiny-f32.gguf", "qwen/tiny35_mtp"}) {
    INFO(rel);
    auto file = tf::model::model_file::open(fixture(rel), tf::model::load_mode::map);
    auto on_cpu = tf::families::open_mtp_head_on<cpu>(file, {1});
    REQUIRE(on_cpu);
    auto const before = fake_cuda::live_bytes();
    auto on_gpu = tf::families::open_mtp_head_on<cuda>(file, {});
    REQUIRE(on_gpu);
    // The budget counts the CUDA head's own copies of its weights; the CPU head's are the file's.
    CHECK(on_gpu->weight_bytes() > 0);
    CHECK(on_gpu->weight_bytes() <= fake_cuda::live_bytes() - before);
    CHECK(on_cpu->weight_bytes() == 0);
    auto const h = static_cast<std::size_t>(on_cpu->hidden_size());
    auto const vocab = static_cast<std::size_t>(on_cpu->vocab_size());
    REQUIRE(static_cast<std::size_t>(on_gpu->hidden_size()) == h);
    on_cpu->set_streams(64, 1);
    on_gpu->set_streams(64, 1);
    auto const pages = tf::test::pages_in_order(on_cpu->kv().num_pages);
    auto const toks = tokens(3, 9, static_cast<std::int64_t>(vocab));
    std::vector<float> hidden(toks.size() * h);
    for (std::size_t i = 0; i < hidden.size(); ++i)
      hidden[i] = std::sin(0.37f * static_cast<float>(i % 97) + 0.011f * static_cast<float>(i));
    auto step = [&](tf::mtp_head& head, std::span<std::int32_t const> t, std::int32_t pos,
                    float const* in, std::vector<float>& logits, std::vector<float>& out) {
      tf::batch_row const row{t, pos, pages, true, -1};
      logits.resize(t.size() * vocab);
      out.resize(t.size() * h);
      head.forward({&row, 1}, in, logits.data(), out.data());
    };
    std::vector<float> la, lb, ha, hb;
    step(*on_cpu, toks, 0, hidden.data(), la, ha);
    step(*on_gpu, toks, 0, hidden.data(), lb, hb);
    auto const dl = compare(la, lb), dh = compare(ha, hb);
    INFO("prompt: max |cpu - cuda| logits " << dl.diff << " of " << dl.top << ", hidden " << dh.diff
                                            << " of " << dh.top);
    CHECK(dl.diff <= 1e-4f * dl.top + 1e-5f);
    CHECK(dh.diff <= 1e-4f * dh.top + 1e-5f);
    // One more position, each head reading its own last hidden state.
    std::int32_t const next = toks.back();
    std::vector<float> const last_a(ha.end() - static_cast<std::ptrdiff_t>(h), ha.end());
    std::vector<float> const last_b(hb.end() - static_cast<std::ptrdiff_t>(h), hb.end());
    auto const at = static_cast<std::int32_t>(toks.size());
    step(*on_cpu, {&next, 1}, at, last_a.data(), la, ha);
    step(*on_gpu, {&next, 1}, at, last_b.data(), lb, hb);
    auto const d = compare(la, lb);
    INFO("next step: max |cpu - cuda| logits " << d.diff << " of " << d.top);
    CHECK(d.diff <= 1e-4f * d.top + 1e-5f);
  }
}

// Gemma 4's assistant on CUDA beside a CUDA target, over the target's KV on the device: the CPU
// assistant's logits and next states within the sums' order, for two steps at one position.
TEST_CASE("on the emulated CUDA backend, Gemma 4's assistant gives the CPU assistant's drafts") {
  namespace gemma = tf::families::gemma;
  auto const target = fixture("gemma/tiny4_e/tiny-share3-f32.gguf");
  auto const drafter = fixture("gemma/tiny4_e/assistant-f32.gguf");
  tf::kv_shape const kv{8, 16, tf::kv_dtype::f32, 0};
  auto const pages = tf::test::pages_in_order(kv.num_pages);
  auto const prompt = tokens(5, 21, 512);
  tf::batch_row const rows{prompt, 0, pages, false, -1};
  auto const pos = static_cast<std::int32_t>(prompt.size());
  auto steps = [&]<class B>(std::type_identity<B>) {
    auto file = tf::model::model_file::open(target, tf::model::load_mode::map);
    tf::engine<gemma::gemma4, B> e(file, kv, {});
    std::vector<float> logits(512), hidden(prompt.size() * 64);
    e.forward({&rows, 1}, logits.data(), hidden.data());
    gemma::gemma4_assistant<B> a(drafter, e.backend(), e.kv_store(), e.bound_weights());
    std::vector<float> state(hidden.end() - 64, hidden.end()), next(64), out;
    std::int32_t token = 7;
    for (int s = 0; s < 2; ++s) {
      tf::batch_row const r{std::span(&token, 1), pos, pages, false, -1};
      a.forward({&r, 1}, state.data(), logits.data(), next.data());
      out.insert(out.end(), logits.begin(), logits.end());
      out.insert(out.end(), next.begin(), next.end());
      token = 11 + s;  // the same tokens on both backends, whatever each one's argmax
      state = next;
    }
    return out;
  };
  auto const on_cpu = steps(std::type_identity<cpu>{});
  auto const on_gpu = steps(std::type_identity<cuda>{});
  auto const d = compare(on_cpu, on_gpu);
  INFO("max |cpu - cuda| = " << d.diff << " of " << d.top);
  CHECK(d.top > 0.0f);
  CHECK(d.diff <= 1e-4f * d.top + 1e-5f);
}
