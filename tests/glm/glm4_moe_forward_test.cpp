// GLM-4.5 MoE forward against transformers' fp32 logits and expert picks on a tiny random-weight
// model (fixtures/glm/tiny45, made by fixtures/scripts/make_glm_moe_tiny.py), from GGUF and
// safetensors.
#include <families/glm/glm4_moe.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/model/gguf.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace glm = tf::families::glm;
using tf::model::model_file;
using tf::test::max_abs_diff;
using tf::test::pages_reversed;
using engine = tf::engine<glm::glm4_moe, tf::backend::cpu>;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/glm/tiny45";

using stream = tf::test::stream<engine>;

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

glm::glm4_moe_weights<tf::backend::cpu> load_moe_weights(model_file const& file) {
  return glm::load_moe_weights(file, binder);
}

// Per MoE layer, per position: the sorted expert ids transformers picked for prompt p.
std::vector<std::vector<std::vector<std::int32_t>>> oracle_experts(std::size_t p) {
  std::vector<std::vector<std::vector<std::int32_t>>> ex;
  for (auto const& [layer, picks] : tf::test::hf_oracle_at(tiny).entries[p].at("experts").items())
    ex.push_back(picks.get<std::vector<std::vector<std::int32_t>>>());
  return ex;
}

// tf's expert picks (the backend's routes since it last cleared them) match transformers' at every
// position, and more than one set is chosen.
void check_routes(engine& fwd, std::vector<std::vector<std::vector<std::int32_t>>> const& want,
                  std::size_t T) {
  int const K = fwd.hparams().experts_per_tok;
  auto const& got = fwd.backend().routes();
  REQUIRE(got.size() == want.size());
  std::set<std::vector<std::int32_t>> distinct;
  int mismatches = 0;
  for (std::size_t m = 0; m < got.size(); ++m) {
    REQUIRE(want[m].size() == T);
    for (std::size_t t = 0; t < T; ++t) {
      std::vector<std::int32_t> picks(got[m].begin() + static_cast<std::ptrdiff_t>(t) * K,
                                      got[m].begin() + static_cast<std::ptrdiff_t>(t + 1) * K);
      std::sort(picks.begin(), picks.end());
      mismatches += picks != want[m][t];
      distinct.insert(picks);
    }
  }
  CHECK(mismatches == 0);
  CHECK(distinct.size() > 1);
}

void check_against_oracle(std::string const& path, float tol, bool greedy_exact) {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(path);
  auto w = load_moe_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.rope_dims == 8);
  float worst = 0;
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    engine fwd(w, {16, 4}, {1});  // small pages so rows cross page boundaries
    fwd.backend().clear_routes();
    fwd.backend().record_routes(true);
    stream s{fwd, pages_reversed(16)};
    auto all = s.feed(o.prompts[p], true);
    check_routes(fwd, oracle_experts(p), o.prompts[p].size());
    fwd.backend().record_routes(false);
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

TEST_CASE(
    "tiny GLM-4.5 MoE, F32 GGUF (stacked experts, MTP layer skipped): logits within 1e-4 of "
    "transformers, greedy exact") {
  check_against_oracle(tiny + "/tiny-f32.gguf", 1e-4f, true);
}

TEST_CASE("tiny GLM-4.5 MoE, HF safetensors: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny, 1e-4f, true);
}

TEST_CASE("tiny GLM-4.5 MoE, Q8_0 GGUF: logits within 1.5 of transformers, top-1 at >= 75%") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = load_moe_weights(file);
  CHECK(w.embd.type == tf::model::tensor_type::q8_0);
  auto const fit = tf::test::fit_to(o, [&](std::size_t p) {
    engine fwd(w, {16, 4}, {1});
    return stream(fwd, pages_reversed(16)).feed(o.prompts[p], true);
  });
  INFO("Q8_0 " << fit);
  // Q8_0 expert weights flip near-tied routing choices on a random model, and a flipped expert
  // moves that position's logits by O(1); the router itself stays F32, as llama.cpp keeps it.
  CHECK(fit.worst <= 1.5f);
  CHECK(fit.agree >= fit.total * 3 / 4);
}

TEST_CASE(
    "a GLM-4.5 MoE row's logits do not depend on the batch, the chunking or the thread count") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = load_moe_weights(file);
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

TEST_CASE("GLM-4.5 MoE f16 KV stays close to f32 KV") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto w = load_moe_weights(file);
  engine f32(w, {16, 4, tf::kv_dtype::f32}, {1});
  engine f16(w, {16, 4, tf::kv_dtype::f16}, {1});
  stream a{f32, pages_reversed(16)}, b{f16, pages_reversed(16)};
  auto la = a.feed(o.prompts[0], true);
  auto lb = b.feed(o.prompts[0], true);
  CHECK(max_abs_diff(la, lb) <= 0.05f);
}

TEST_CASE(
    "GLM-4.5 MoE on the engine: accepts glm4moe and glm4_moe, leaves out the MTP layer, sizes KV, "
    "and binds a file") {
  auto accepts = [](std::string_view arch) {
    return std::ranges::find(glm::glm4_moe::arch_names, arch) != glm::glm4_moe::arch_names.end();
  };
  CHECK(accepts("glm4moe"));
  CHECK(accepts("glm4_moe"));
  CHECK_FALSE(accepts("glm4"));
  STATIC_REQUIRE(tf::has_forward<glm::glm4_moe, tf::backend::cpu>);
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  CHECK(engine::kv_bytes_per_token(file, tf::kv_dtype::f32) ==
        3u * 2 * 2 * 16 * 4);  // 3 decoder layers; block_count 4 counts MTP
  CHECK(engine::context_length(file) == 256);
  engine fwd(file, {4, 16}, {1});
  CHECK(fwd.vocab_size() == 1200);  // the toy GLM-4 tokenizer's vocabulary
}

TEST_CASE("bad GLM-4.5 MoE batches throw tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  engine fwd(load_moe_weights(file), {4, 4}, {1});
  tf::test::check_bad_batches_throw(fwd);
}

namespace {

// A GGUF seen with one tensor missing, or cut short.
struct damaged {
  tf::model::gguf_file const& g;
  std::string name;
  bool drop;
  mutable tf::model::tensor_view cut;
  tf::model::tensor_view const* find_tensor(std::string_view n) const {
    auto const* t = g.find_tensor(n);
    if (!t || n != name) return t;
    if (drop) return nullptr;
    cut = *t;
    cut.bytes /= 2;
    return &cut;
  }
};

}  // namespace

TEST_CASE("a GLM-4.5 MoE file with a missing or short tensor gives a tf::error naming it") {
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto const& g = *file.gguf();
  auto const hp = glm::moe_hparams_from_gguf(g);
  for (std::string name : {"blk.1.ffn_up_exps.weight", "blk.2.exp_probs_b.bias",
                           "blk.1.ffn_gate_inp.weight", "blk.0.attn_q_norm.weight"}) {
    for (bool drop : {true, false}) {
      INFO(name << (drop ? " missing" : " short"));
      damaged d{g, name, drop, {}};
      CHECK_THROWS_WITH(glm::bind_moe_weights(d, hp, glm::name_style::gguf, binder),
                        Catch::Contains(name));
    }
  }
}
