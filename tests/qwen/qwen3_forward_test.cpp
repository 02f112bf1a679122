// Qwen3 forward against transformers' fp32 logits on a tiny random-weight model
// (fixtures/qwen/tiny, made by fixtures/scripts/make_qwen_tiny.py), from GGUF and safetensors.
#include <families/qwen/qwen3.hpp>
#include <families/registry.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tests/common/rows8_check.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/model/gguf.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
using tf::model::model_file;
using tf::test::max_abs_diff;
using engine = tf::engine<qwen::qwen3, tf::backend::cpu>;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/qwen/tiny";

using stream = tf::test::stream<engine>;

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

qwen::qwen3_weights<tf::backend::cpu> load_weights(model_file const& file) {
  return qwen::load_weights(file, binder);
}

// Logits for every prompt position, and the greedy continuation, compared with the oracle.
void check_against_oracle(std::string const& path, float tol, tf::kv_dtype dtype) {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(path);
  auto w = load_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK_FALSE(w.hp.tie_word_embeddings);
  CHECK(w.output.data != w.embd.data);
  engine fwd(w, {16, 4, dtype}, {2});  // small pages so rows cross page boundaries
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    stream s(fwd);
    auto all = s.feed(o.prompts[p], true);
    float err = max_abs_diff(all, o.logits[p]);
    INFO(path << " prompt " << p << " max |tf - transformers| = " << err << " (tolerance " << tol
              << ")");
    CHECK(err <= tol);
    auto got = s.greedy(all, o.greedy[p].size());
    CHECK(got.size() == 16);
    CHECK(got == o.greedy[p]);
  }
}

}  // namespace

TEST_CASE("tiny Qwen3, F32 GGUF: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny + "/tiny-f32.gguf", 1e-4f, tf::kv_dtype::f32);
}

TEST_CASE("tiny Qwen3, HF safetensors: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny, 1e-4f, tf::kv_dtype::f32);
}

TEST_CASE("tiny Qwen3, Q8_0 GGUF read into memory: rows8 head, the mapped file's logits exactly") {
  tf::test::check_rows8_head<engine>(
      tiny + "/tiny-q8_0.gguf", [](model_file const& f) { return load_weights(f); },
      tf::test::hf_oracle_at(tiny).prompts);
}

TEST_CASE("tiny Qwen3, F32 GGUF with f16 KV: logits within 2e-2 of transformers") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  engine fwd(load_weights(file), {16, 4, tf::kv_dtype::f16}, {1});
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    stream s(fwd);
    auto all = s.feed(o.prompts[p], true);
    float err = max_abs_diff(all, o.logits[p]);
    INFO("f16 KV prompt " << p << " max err " << err);
    CHECK(err <= 2e-2f);  // f16 rounding of K, V, q and the probabilities
  }
}

TEST_CASE("tiny Qwen3, Q8_0 GGUF: logits within 0.25 of transformers, top-1 at >= 90%") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  engine fwd(load_weights(file), {64, 4}, {1});
  auto const fit =
      tf::test::fit_to(o, [&](std::size_t p) { return stream(fwd).feed(o.prompts[p], true); });
  INFO("Q8_0 " << fit);
  CHECK(fit.worst <= 0.25f);  // Q8_0 weights on a random model
  CHECK(fit.agree >= fit.total * 9 / 10);
}

TEST_CASE("a Qwen3 row's logits do not depend on the batch, the chunking or the thread count") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = load_weights(file);
  std::int64_t const V = o.vocab;
  std::vector<std::vector<float>> solo;  // each prompt alone, one thread, one forward
  {
    engine f1(w, {16, 4}, {1});
    for (auto const& p : o.prompts) solo.push_back(stream(f1).feed(p, false));
  }
  for (int threads : {1, 2}) {
    engine fwd(w, {48, 4}, {threads});
    INFO("threads " << threads);
    tf::test::check_batch_independent(fwd, o.prompts, solo, V);
  }
}

TEST_CASE("bad Qwen3 batches throw tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  engine fwd(load_weights(file), {4, 4}, {1});
  CHECK(fwd.vocab_size() == 1200);
  tf::test::check_bad_batches_throw(fwd);
  CHECK_THROWS_AS(engine(load_weights(file), {0, 4}, {1}), tf::error);
}

TEST_CASE("a Qwen3 GGUF missing a tensor or with a wrong shape names it in the tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto const* g = file.gguf();
  REQUIRE(g);
  auto hp = qwen::hparams_from_gguf(*g);
  struct missing {
    decltype(g) inner;
    std::string drop;
    auto const* find_tensor(std::string_view n) const {
      return n == drop ? nullptr : inner->find_tensor(n);
    }
  };
  auto msg_of = [&](auto const& f, qwen::qwen3_hparams const& h) {
    try {
      qwen::bind_weights(f, h, qwen::name_style::gguf, binder);
    } catch (tf::error const& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(msg_of(missing{g, "blk.1.attn_k_norm.weight"}, hp),
             Catch::Contains("blk.1.attn_k_norm.weight"));
  CHECK_THAT(msg_of(missing{g, "output.weight"}, hp), Catch::Contains("output.weight"));
  auto wrong = hp;
  wrong.intermediate_size = 96;
  CHECK_THAT(msg_of(missing{g, ""}, wrong), Catch::Contains("blk.0.ffn_gate.weight"));
  auto tied = hp;  // a tied model without output.weight uses the embedding as its head
  tied.tie_word_embeddings = true;
  auto w = qwen::bind_weights(missing{g, "output.weight"}, tied, qwen::name_style::gguf, binder);
  CHECK(w.output.data == w.embd.data);
}

TEST_CASE("the family registry runs the Qwen3 GGUF as qwen3 on the CPU") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto accepts = [](std::string_view arch) {
    return std::ranges::find(qwen::qwen3::arch_names, arch) != qwen::qwen3::arch_names.end();
  };
  CHECK(accepts("qwen3"));
  CHECK_FALSE(accepts("qwen3moe"));
  STATIC_REQUIRE(tf::has_forward<qwen::qwen3, tf::backend::cpu>);
  auto name =
      tf::families::dispatch("qwen3", [](auto t) { return std::string(decltype(t)::type::name); });
  CHECK(name == "qwen3");
  // 2 layers x 2 KV heads x 16 x (K and V) x 4 bytes
  CHECK(engine::kv_bytes_per_token(file, tf::kv_dtype::f32) == 2 * 2 * 16 * 2 * 4);
  CHECK(engine::context_length(file) == 256);
}
