// Gemma 3 forward against transformers' fp32 logits on a tiny random-weight model
// (fixtures/gemma/tiny, made by fixtures/scripts/make_gemma_tiny.py), from GGUF and safetensors.
#include <families/gemma/gemma3.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/stream.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace gemma = tf::families::gemma;
using tf::model::model_file;
using tf::test::max_abs_diff;
using engine = tf::engine<gemma::gemma3, tf::backend::cpu>;

namespace {

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

gemma::gemma3_weights<tf::backend::cpu> load_weights(model_file const& file) {
  return gemma::load_weights(file, binder);
}

// One stream of `context` positions in pages of `page_tokens`, f32 KV.
struct generator {
  engine e;
  tf::stream<engine> s;
  generator(gemma::gemma3_weights<tf::backend::cpu> w, std::int32_t context, int threads,
            std::int32_t page_tokens = 256)
      : e(std::move(w), tf::one_stream_shape(context, page_tokens, tf::kv_dtype::f32), {threads}),
        s(e) {}
  void reset() { s.reset(); }
  std::span<float const> feed(std::span<std::int32_t const> t) { return s.feed(t); }
  std::span<float const> feed_all(std::span<std::int32_t const> t) { return s.feed_all(t); }
};

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/gemma/tiny";

// Logits for every prompt position, and the greedy continuation, compared with the oracle.
void check_against_oracle(std::string const& path, float tol) {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(path);
  auto w = load_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.sliding_window == 8);
  CHECK(w.hp.is_sliding(0));
  CHECK_FALSE(w.hp.is_sliding(5));
  generator gen(w, 64, 2, 4);  // small pages so rows cross page boundaries
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    gen.reset();
    auto all = gen.feed_all(o.prompts[p]);
    float err = max_abs_diff(all, o.logits[p]);
    INFO(path << " prompt " << p << " max |tf - transformers| = " << err << " (tolerance " << tol
              << ")");
    CHECK(err <= tol);
    auto next = [&](std::int32_t t) { return gen.feed({&t, 1}); };
    auto got = tf::test::greedy_tokens(tf::test::last_row(all, o.vocab), o.greedy[p].size(), next);
    CHECK(got == o.greedy[p]);
  }
}

}  // namespace

TEST_CASE("tiny Gemma 3, F32 GGUF: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny + "/tiny-f32.gguf", 1e-4f);
}

TEST_CASE("tiny Gemma 3, HF safetensors (zero-centred norms): logits within 1e-4, greedy exact") {
  check_against_oracle(tiny, 1e-4f);
}

TEST_CASE("tiny Gemma 3, Q8_0 GGUF: logits within 0.25 of transformers, top-1 at >= 90%") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  generator gen(load_weights(file), 64, 1);
  auto const fit = tf::test::fit_to(o, [&](std::size_t p) {
    gen.reset();
    auto const all = gen.feed_all(o.prompts[p]);
    return std::vector<float>(all.begin(), all.end());
  });
  INFO("Q8_0 " << fit);
  CHECK(fit.worst <= 0.25f);  // Q8_0 weights on a random model: ~3% of the logit range
  CHECK(fit.agree >= fit.total * 9 / 10);
}

TEST_CASE("a read file's head is in rows8 on AVX-512 and gives the mapped file's logits") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto mapped = model_file::open(tiny + "/tiny-q8_0.gguf", tf::model::load_mode::map);
  auto read = model_file::open(tiny + "/tiny-q8_0.gguf", tf::model::load_mode::read);
  auto const wm = load_weights(mapped);
  auto const wr = load_weights(read);
  using tf::kernels::cpu::weight_layout;
  // Only the AVX-512 VNNI path has a rows8 kernel; elsewhere the file keeps its row order.
  bool const vnni = tf::kernels::cpu::default_isa() == tf::kernels::cpu::isa::avx512;
  auto const want = vnni ? weight_layout::rows8 : weight_layout::rows;
  CHECK(wm.embd.layout == weight_layout::rows);
  REQUIRE(wr.embd.layout == want);
  CHECK(wr.output.layout == want);
  CHECK(read.gguf()->layout_of(*read.gguf()->find_tensor("token_embd.weight")) ==
        (vnni ? "rows8" : ""));
  // A second bind of the same file finds the layout already there.
  CHECK(load_weights(read).embd.layout == want);
  for (int threads : {1, 2}) {
    generator gm(wm, 64, threads), gr(wr, 64, threads);
    for (auto const& p : o.prompts) {
      gm.reset();
      gr.reset();
      auto const a = gm.feed_all(p);
      std::vector<float> const want(a.begin(), a.end());
      auto const b = gr.feed_all(p);  // prompt rows through the batched head
      CHECK(std::vector<float>(b.begin(), b.end()) == want);
      gm.reset();
      gr.reset();
      for (std::int32_t tok : p) {  // one token at a time through the one-row head
        std::span<std::int32_t const> const one(&tok, 1);
        auto const x = gm.feed(one);
        auto const y = gr.feed(one);
        CHECK(std::vector<float>(y.begin(), y.end()) == std::vector<float>(x.begin(), x.end()));
      }
    }
  }
}

TEST_CASE("a row's logits do not depend on the batch, the chunking or the thread count") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = load_weights(file);
  std::int64_t const V = o.vocab;
  // Reference: each prompt alone, one thread, one forward for the whole prompt.
  std::vector<std::vector<float>> solo;
  for (auto const& p : o.prompts) {
    generator g(w, 64, 1, 4);
    auto l = g.feed(p);
    solo.emplace_back(l.begin(), l.end());
  }
  for (int threads : {1, 2, 3}) {
    engine fwd(w, {48, 4}, {threads});
    INFO("threads " << threads);
    tf::test::check_batch_independent(fwd, o.prompts, solo, V);
  }
}

TEST_CASE("bad batches throw tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  engine fwd(load_weights(file), {4, 4}, {1});
  tf::test::check_bad_batches_throw(fwd);
  std::vector<float> out(512 * 2);
  std::vector<std::int32_t> toks{1, 2, 3}, pages{0};
  tf::batch_row neg{toks, -1, pages};
  CHECK_THROWS_AS(fwd.forward({&neg, 1}, out.data()), tf::error);
  CHECK_THROWS_AS(engine(load_weights(file), {0, 4}, {1}), tf::error);
}
