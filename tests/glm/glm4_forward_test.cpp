// GLM-4 dense forward against transformers' fp32 logits on a tiny random-weight model
// (fixtures/glm/tiny4, made by fixtures/scripts/make_glm_tiny.py), from GGUF and safetensors.
#include <families/glm/glm4.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tests/common/rows8_check.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace glm = tf::families::glm;
using tf::model::model_file;
using tf::test::max_abs_diff;
using tf::test::pages_reversed;
using engine = tf::engine<glm::glm4, tf::backend::cpu>;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/glm/tiny4";

using stream = tf::test::stream<engine>;

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

glm::glm4_weights<tf::backend::cpu> load_weights(model_file const& file) {
  return glm::load_weights(file, binder);
}

void check_against_oracle(std::string const& path, float tol, bool greedy_exact) {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(path);
  auto w = load_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.rope_dims == 8);
  float worst = 0;
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    engine fwd(w, {16, 4}, {1});  // small pages so rows cross page boundaries
    stream s{fwd, pages_reversed(16)};
    auto all = s.feed(o.prompts[p], true);
    float const err = max_abs_diff(all, o.logits[p]);
    worst = std::max(worst, err);
    INFO(path << " prompt " << p << " max |tf - transformers| = " << err << " (tolerance " << tol
              << ")");
    CHECK(err <= tol);
    auto got = s.greedy(all, o.greedy[p].size());
    if (greedy_exact) CHECK(got == o.greedy[p]);
  }
  WARN(path << ": worst max |tf - transformers| = " << worst);
}

}  // namespace

TEST_CASE("tiny GLM-4, F32 GGUF (fused ffn_up): logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny + "/tiny-f32.gguf", 1e-4f, true);
}

TEST_CASE("tiny GLM-4, HF safetensors: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny, 1e-4f, true);
}

TEST_CASE("tiny GLM-4, Q8_0 GGUF read into memory: rows8 head, the mapped file's logits exactly") {
  tf::test::check_rows8_head<engine>(
      tiny + "/tiny-q8_0.gguf", [](model_file const& f) { return load_weights(f); },
      tf::test::hf_oracle_at(tiny).prompts);
}

TEST_CASE("tiny GLM-4, Q8_0 GGUF: logits within 0.25 of transformers, top-1 at >= 90%") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = load_weights(file);
  CHECK(w.embd.type == tf::model::tensor_type::q8_0);
  auto const fit = tf::test::fit_to(o, [&](std::size_t p) {
    engine fwd(w, {16, 4}, {1});
    return stream(fwd, pages_reversed(16)).feed(o.prompts[p], true);
  });
  INFO("Q8_0 " << fit);
  CHECK(fit.worst <= 0.25f);  // Q8_0 weights on a random model
  CHECK(fit.agree >= fit.total * 9 / 10);
}

TEST_CASE("a GLM-4 row's logits do not depend on the batch, the chunking or the thread count") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = load_weights(file);
  std::int64_t const V = o.vocab;
  std::vector<std::vector<float>> solo;
  for (auto const& p : o.prompts) {
    engine f(w, {16, 4}, {1});
    stream s{f, pages_reversed(16)};
    solo.push_back(s.feed(p, false));
  }
  for (int threads : {1, 2}) {
    engine fwd(w, {48, 4}, {threads});
    INFO("threads " << threads);
    tf::test::check_batch_independent(fwd, o.prompts, solo, V);
  }
}

TEST_CASE("GLM-4 f16 KV stays close to f32 KV") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto w = load_weights(file);
  engine f32(w, {16, 4, tf::kv_dtype::f32}, {1});
  engine f16(w, {16, 4, tf::kv_dtype::f16}, {1});
  stream a{f32, pages_reversed(16)}, b{f16, pages_reversed(16)};
  auto la = a.feed(o.prompts[0], true);
  auto lb = b.feed(o.prompts[0], true);
  CHECK(max_abs_diff(la, lb) <= 0.05f);
}

TEST_CASE("GLM-4 on the engine: accepts glm4, sizes KV, and binds a file") {
  auto accepts = [](std::string_view arch) {
    return std::ranges::find(glm::glm4::arch_names, arch) != glm::glm4::arch_names.end();
  };
  CHECK(accepts("glm4"));
  CHECK_FALSE(accepts("glm4moe"));
  STATIC_REQUIRE(tf::has_forward<glm::glm4, tf::backend::cpu>);
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  CHECK(engine::kv_bytes_per_token(file, tf::kv_dtype::f32) == 2u * 2 * 2 * 16 * 4);
  CHECK(engine::context_length(file) == 256);
  engine fwd(file, {4, 16}, {1});
  CHECK(fwd.vocab_size() == 1200);  // the vocab of fixtures/tokenizer/bpe_glm4
}

TEST_CASE("bad GLM-4 batches throw tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  engine fwd(load_weights(file), {4, 4}, {1});
  CHECK(fwd.vocab_size() == 1200);
  tf::test::check_bad_batches_throw(fwd);
}
