// Gemma 3 on the default model (270M Q4_K_M) against llama.cpp's greedy continuations
// (fixtures/gemma/llama_goldens.json, made by fixtures/scripts/make_llama_goldens.py) and
// transformers' logits on the same file (fixtures/gemma/hf_gguf_logits.json), plus bit-identity
// across thread counts and batch sizes. Skips when the model file is absent.
#include <families/gemma/gemma3.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/stream.hpp>
#include <tf/model/default_model.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>
#include "../common/cannot_run.hpp"

namespace gemma = tf::families::gemma;
using engine = tf::engine<gemma::gemma3, tf::backend::cpu>;
using weights = engine::weights;

namespace {

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

weights load_weights(tf::model::model_file const& file) {
  return gemma::load_weights(file, binder);
}

// One stream of `context` positions in pages of `page_tokens`.
struct generator {
  engine e;
  tf::stream<engine> s;
  generator(weights w, std::int32_t context, int threads, std::int32_t page_tokens,
            tf::kv_dtype dtype)
      : e(std::move(w), tf::one_stream_shape(context, page_tokens, dtype), {threads}), s(e) {}
  void reset() { s.reset(); }
  engine& forward() { return e; }
  std::span<float const> feed(std::span<std::int32_t const> t) { return s.feed(t); }
  std::span<float const> feed_all(std::span<std::int32_t const> t) { return s.feed_all(t); }
};

struct golden {
  std::string kind;
  std::vector<std::int32_t> prompt, continuation, batched_top1, single_top1;
  std::vector<float> margin;  // llama.cpp's top-1 minus top-2 logit at each step
};

std::vector<golden> load_goldens() {
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/gemma/llama_goldens.json");
  REQUIRE(in.good());
  auto j = nlohmann::json::parse(in);
  std::vector<golden> out;
  for (auto const& p : j.at("prompts"))
    out.push_back({p.at("kind").get<std::string>(), p.at("prompt").get<std::vector<std::int32_t>>(),
                   p.at("continuation").get<std::vector<std::int32_t>>(),
                   p.at("batched_top1").get<std::vector<std::int32_t>>(),
                   p.at("single_top1").get<std::vector<std::int32_t>>(),
                   p.at("margin").get<std::vector<float>>()});
  return out;
}

// The default model, or nothing (with a message) when it is not on this machine.
tf::model::model_file const* default_model() {
  static std::unique_ptr<tf::model::model_file> file =
      []() -> std::unique_ptr<tf::model::model_file> {
    try {
      auto path = tf::model::resolve_model_path(std::nullopt);
      if (!std::filesystem::exists(path)) throw tf::error("no file at {}", path.string());
      return std::make_unique<tf::model::model_file>(tf::model::model_file::open(path));
    } catch (std::exception const& e) {
      std::printf("SKIP: the default model (Gemma 3 270M Q4_K_M) is absent: %s\n", e.what());
      return nullptr;
    }
  }();
  return file.get();
}

std::int32_t argmax(std::span<float const> l) {
  return static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

}  // namespace

// tf's f16-KV forward follows llama.cpp's CPU decode path (AVX2 build, as the goldens were made)
// bit for bit, so tf's top-1 is llama.cpp's one-token-per-call top-1 (single_top1) everywhere on
// the x86 paths. The goldens' prompts went through llama.cpp in one batch, whose attention sums
// in another order, hence the misses (llama.cpp's own batched pass, batched_top1, agrees at
// ~98.7%). Bar: top-1 agreement >= 99% of the positions and at least llama.cpp batched's, each
// miss a near-tie for llama.cpp (margin <= 0.5) and for tf (gap <= 1).
TEST_CASE(
    "teacher-forced on llama.cpp's greedy continuations: >= 99% top-1, misses are near-ties") {
  auto const* file = default_model();
  if (!file) {
    tf::test::cannot_run("the default model (Gemma 3 270M Q4_K_M) is absent");
    return;
  }
  auto goldens = load_goldens();
  REQUIRE(goldens.size() >= 8);
  // f16 KV as llama.cpp keeps it, so both round q, K, V and the probabilities alike.
  generator gen(load_weights(*file), 256, 2, 256, tf::kv_dtype::f16);
  auto const V = static_cast<std::size_t>(gen.forward().vocab_size());
  int agree = 0, total = 0, exact = 0, llama_batched = 0, llama_single = 0;
  bool const x86 = tf::kernels::cpu::default_isa() != tf::kernels::cpu::isa::portable;
  for (auto const& g : goldens) {
    REQUIRE(g.batched_top1.size() == g.continuation.size());
    REQUIRE(g.margin.size() == g.continuation.size());
    REQUIRE(g.single_top1.size() == g.continuation.size());
    std::vector<std::int32_t> seq(g.prompt);
    seq.insert(seq.end(), g.continuation.begin(), g.continuation.end() - 1);
    gen.reset();
    auto all = gen.feed_all(seq);
    bool same = true;
    for (std::size_t i = 0; i < g.continuation.size(); ++i) {
      auto row = all.subspan((g.prompt.size() - 1 + i) * V, V);
      auto best = argmax(row);
      bool ok = best == g.continuation[i];
      llama_batched += g.batched_top1[i] == g.continuation[i];
      llama_single += g.single_top1[i] == g.continuation[i];
      // llama.cpp one token per call, the prompt too: its decode path, which tf follows bit for bit
      if (x86) CHECK(best == g.single_top1[i]);
      if (!ok) {
        float const gap =
            row[static_cast<std::size_t>(best)] - row[static_cast<std::size_t>(g.continuation[i])];
        CHECK(gap <= 1.0f);
        CHECK(g.margin[i] <= 0.5f);
        std::printf(
            "  differs at %s prompt position %zu: tf %d (%.4f), llama.cpp %d (%.4f), llama.cpp's "
            "margin %.3f\n",
            g.kind.c_str(), g.prompt.size() + i, best, row[static_cast<std::size_t>(best)],
            g.continuation[i], row[static_cast<std::size_t>(g.continuation[i])],
            static_cast<double>(g.margin[i]));
      }
      agree += ok;
      same = same && ok;
      ++total;
    }
    exact += same;
  }
  std::printf(
      "llama.cpp goldens: tf's top-1 agrees at %d/%d positions (%.2f%%); llama.cpp's own batched "
      "top-1 at %d/%d (%.2f%%), one token per call at %d/%d; %d/%zu continuations match "
      "exactly\n",
      agree, total, 100.0 * agree / total, llama_batched, total, 100.0 * llama_batched / total,
      llama_single, total, exact, goldens.size());
  CHECK(agree >= llama_batched);
  CHECK(agree * 100 >= total * 99);
}

// FNV-1a 64 over a logits row's bytes, as fixtures/scripts/make_llama_decode_logits.py hashes it.
std::uint64_t fnv1a64(std::span<float const> row) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto const* b = reinterpret_cast<unsigned char const*>(row.data());
  for (std::size_t i = 0; i < row.size_bytes(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// llama.cpp's logits evaluated one token per call (its decode path, AVX2 build): tf's f16-KV
// forward gives the same bits at every position, fed one token at a time and in one batch, at 1
// and 2 threads. Tolerance: none (the row's hash and the top 8 logits exactly).
TEST_CASE("default model: logits bit-identical to llama.cpp's one-token-at-a-time decode") {
  auto const* file = default_model();
  if (!file) {
    tf::test::cannot_run("the default model (Gemma 3 270M Q4_K_M) is absent");
    return;
  }
  if (tf::kernels::cpu::default_isa() == tf::kernels::cpu::isa::portable) {
    SUCCEED("SKIP: the portable kernels sum in their own order; llama.cpp's is the x86 paths'");
    return;
  }
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/gemma/llama_decode_logits.json");
  REQUIRE(in.good());
  auto const j = nlohmann::json::parse(in);
  REQUIRE(j.at("prompts").size() >= 4);
  for (int threads : {1, 2}) {
    generator gen(load_weights(*file), 256, threads, 256, tf::kv_dtype::f16);
    auto const V = static_cast<std::size_t>(gen.forward().vocab_size());
    int rows = 0, same = 0;
    for (auto const& p : j.at("prompts")) {
      auto const toks = p.at("tokens").get<std::vector<std::int32_t>>();
      auto const& want = p.at("positions");
      REQUIRE(want.size() == toks.size());
      gen.reset();
      auto const fed = gen.feed_all(toks);
      std::vector<float> const all(fed.begin(), fed.end());
      gen.reset();
      for (std::size_t i = 0; i < toks.size(); ++i) {
        auto const one = gen.feed(std::span(&toks[i], 1));
        auto const row = std::span<float const>(all).subspan(i * V, V);
        INFO(p.at("kind").get<std::string>() << " position " << i << " threads " << threads);
        REQUIRE(std::equal(one.begin(), one.end(), row.begin()));
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(row)));
        bool ok = want[i].at("fnv1a64").get<std::string>() == hex;
        for (auto const& t : want[i].at("top"))
          ok = ok && row[t.at(0).get<std::size_t>()] == t.at(1).get<float>();
        CHECK(ok);
        same += ok;
        ++rows;
      }
    }
    std::printf("llama.cpp decode logits: %d/%d rows bit-identical at %d thread(s)\n", same, rows,
                threads);
  }
}

// transformers' fp32 forward on the same GGUF, dequantized by its GGUF loader
// (fixtures/scripts/make_hf_gguf_logits.py): tf quantizes activations to Q8 for the dot products
// and transformers does not, so logits differ by a few tenths. Tolerances: top-1 at >= 98% of the
// positions, and over transformers' top-8 tokens at every position a mean |tf - hf| <= 0.3 and a
// largest <= 2.5.
TEST_CASE("default model against transformers on the dequantized GGUF (f32 KV)") {
  auto const* file = default_model();
  if (!file) {
    tf::test::cannot_run("the default model (Gemma 3 270M Q4_K_M) is absent");
    return;
  }
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/gemma/hf_gguf_logits.json");
  REQUIRE(in.good());
  auto const j = nlohmann::json::parse(in);
  generator gen(load_weights(*file), 256, 2, 256, tf::kv_dtype::f32);
  auto const V = static_cast<std::size_t>(gen.forward().vocab_size());
  int agree = 0, total = 0, n = 0;
  double worst = 0.0, sum = 0.0;
  for (auto const& p : j.at("prompts")) {
    auto const seq = p.at("sequence").get<std::vector<std::int32_t>>();
    auto const first = p.at("first").get<std::size_t>();
    gen.reset();
    auto all = gen.feed_all(seq);
    auto const& rows = p.at("rows");
    REQUIRE(first + rows.size() == seq.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto row = all.subspan((first + r) * V, V);
      auto const ids = rows[r].at("ids").get<std::vector<std::int32_t>>();
      auto const want = rows[r].at("logits").get<std::vector<double>>();
      agree += argmax(row) == ids[0];
      ++total;
      for (std::size_t k = 0; k < ids.size(); ++k) {
        double const d = std::fabs(row[static_cast<std::size_t>(ids[k])] - want[k]);
        worst = std::max(worst, d);
        sum += d;
        ++n;
      }
    }
  }
  std::printf(
      "transformers (dequantized GGUF, fp32): top-1 agrees at %d/%d positions; |tf - hf| over "
      "its top-8: mean %.4f, max %.4f\n",
      agree, total, sum / n, worst);
  CHECK(total == 576);
  CHECK(agree * 100 >= total * 98);
  CHECK(sum / n <= 0.3);
  CHECK(worst <= 2.5);
}

TEST_CASE("default model: threads 1 vs 2 and batch 1 vs 8 give bit-identical logits") {
  auto const* file = default_model();
  if (!file) {
    tf::test::cannot_run("the default model (Gemma 3 270M Q4_K_M) is absent");
    return;
  }
  auto goldens = load_goldens();
  auto w = load_weights(*file);
  auto const V = static_cast<std::size_t>(w.hp.vocab_size);
  std::int32_t const pt = 16;
  std::size_t const n = 8;
  // Alone, one thread: each prompt's last logits.
  std::vector<std::vector<float>> solo;
  {
    engine fwd(w, {8, pt}, {1});
    std::vector<std::int32_t> table{0, 1, 2, 3, 4, 5, 6, 7};
    for (std::size_t i = 0; i < n; ++i) {
      tf::batch_row row{goldens[i].prompt, 0, table};
      std::vector<float> out(V);
      fwd.forward({&row, 1}, out.data());
      solo.push_back(out);
    }
  }
  // Two threads, alone.
  {
    engine fwd(w, {8, pt}, {2});
    std::vector<std::int32_t> table{7, 6, 5, 4, 3, 2, 1, 0};
    for (std::size_t i = 0; i < n; ++i) {
      tf::batch_row row{goldens[i].prompt, 0, table};
      std::vector<float> out(V);
      fwd.forward({&row, 1}, out.data());
      INFO("prompt " << i << ", 2 threads vs 1");
      CHECK(std::equal(out.begin(), out.end(), solo[i].begin()));
    }
  }
  // Eight streams in one forward, two threads.
  engine fwd(w, {static_cast<std::int32_t>(4 * n), pt}, {2});
  std::vector<std::vector<std::int32_t>> tables(n);
  std::vector<tf::batch_row> rows;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t p = 0; p < 4; ++p) tables[i].push_back(static_cast<std::int32_t>(p * n + i));
    rows.push_back({goldens[i].prompt, 0, tables[i]});
  }
  std::vector<float> out(n * V);
  fwd.forward(rows, out.data());
  for (std::size_t i = 0; i < n; ++i) {
    INFO("prompt " << i << ", batch of 8 vs alone");
    CHECK(std::equal(out.begin() + static_cast<std::ptrdiff_t>(i * V),
                     out.begin() + static_cast<std::ptrdiff_t>((i + 1) * V), solo[i].begin()));
  }
  // Then one decode token per stream, batched, against the same token fed alone.
  std::vector<std::int32_t> next(n);
  std::vector<tf::batch_row> step;
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = argmax(std::span<float const>(solo[i]));
    step.push_back(
        {std::span(&next[i], 1), static_cast<std::int32_t>(goldens[i].prompt.size()), tables[i]});
  }
  std::vector<float> dec(n * V);
  fwd.forward(step, dec.data());
  engine alone(w, {8, pt}, {1});
  std::vector<std::int32_t> table{0, 1, 2, 3, 4, 5, 6, 7};
  for (std::size_t i = 0; i < n; ++i) {
    tf::batch_row p{goldens[i].prompt, 0, table};
    std::vector<float> tmp(V);
    alone.forward({&p, 1}, tmp.data());
    tf::batch_row d{std::span(&next[i], 1), static_cast<std::int32_t>(goldens[i].prompt.size()),
                    table};
    alone.forward({&d, 1}, tmp.data());
    INFO("prompt " << i << ", batched decode step vs alone");
    CHECK(std::equal(tmp.begin(), tmp.end(), dec.begin() + static_cast<std::ptrdiff_t>(i * V)));
  }
}
