// Gemma 3 forward against transformers' fp32 logits on a tiny random-weight model
// (fixtures/gemma/tiny, made by fixtures/scripts/make_gemma_tiny.py), from GGUF and safetensors.
#include <families/gemma/gemma3_forward.hpp>
#include <families/gemma/gemma3_generator.hpp>
#include <families/gemma/gemma3_load.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace gemma = tf::families::gemma;
using tf::model::model_file;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/gemma/tiny";

struct oracle {
  int vocab = 0;
  std::vector<std::vector<std::int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // per prompt [T, vocab]
};

oracle const& load_oracle() {
  static oracle o = [] {
    oracle r;
    std::ifstream js(tiny + "/expected.json");
    REQUIRE(js.good());
    auto j = nlohmann::json::parse(js);
    r.vocab = j.at("vocab_size").get<int>();
    std::ifstream bin(tiny + "/logits.bin", std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
    std::size_t off = 0;
    for (auto const& p : j.at("prompts")) {
      r.prompts.push_back(p.at("prompt").get<std::vector<std::int32_t>>());
      r.greedy.push_back(p.at("greedy").get<std::vector<std::int32_t>>());
      std::vector<float> l(r.prompts.back().size() * static_cast<std::size_t>(r.vocab));
      REQUIRE(off + l.size() * 4 <= raw.size());
      std::memcpy(l.data(), raw.data() + off, l.size() * 4);
      off += l.size() * 4;
      r.logits.push_back(std::move(l));
    }
    REQUIRE(off == raw.size());
    return r;
  }();
  return o;
}

float max_abs_diff(std::span<float const> a, std::span<float const> b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::int32_t argmax(std::span<float const> l) {
  return static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// Logits for every prompt position, and the greedy continuation, compared with the oracle.
void check_against_oracle(std::string const& path, float tol) {
  auto const& o = load_oracle();
  auto file = model_file::open(path);
  auto w = gemma::load_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.sliding_window == 8);
  CHECK(w.hp.is_sliding(0));
  CHECK_FALSE(w.hp.is_sliding(5));
  gemma::generator gen(w, 64, 2, 4);  // small pages so rows cross page boundaries
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    gen.reset();
    auto all = gen.feed_all(o.prompts[p]);
    float err = max_abs_diff(all, o.logits[p]);
    INFO(path << " prompt " << p << " max |tf - transformers| = " << err << " (tolerance " << tol
              << ")");
    CHECK(err <= tol);
    std::vector<std::int32_t> got;
    auto last = all.subspan(all.size() - static_cast<std::size_t>(o.vocab));
    std::vector<float> cur(last.begin(), last.end());
    for (std::size_t i = 0; i < o.greedy[p].size(); ++i) {
      auto t = argmax(cur);
      got.push_back(t);
      auto next = gen.feed({&t, 1});
      cur.assign(next.begin(), next.end());
    }
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
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  gemma::generator gen(gemma::load_weights(file), 64, 1);
  float worst = 0;
  int agree = 0, total = 0;
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    gen.reset();
    auto all = gen.feed_all(o.prompts[p]);
    worst = std::max(worst, max_abs_diff(all, o.logits[p]));
    for (std::size_t t = 0; t < o.prompts[p].size(); ++t) {
      auto row =
          all.subspan(t * static_cast<std::size_t>(o.vocab), static_cast<std::size_t>(o.vocab));
      auto ref =
          std::span<float const>(o.logits[p])
              .subspan(t * static_cast<std::size_t>(o.vocab), static_cast<std::size_t>(o.vocab));
      agree += argmax(row) == argmax(ref);
      ++total;
    }
  }
  INFO("Q8_0 max |tf - transformers| = " << worst << ", top-1 agrees at " << agree << "/" << total);
  CHECK(worst <= 0.25f);  // Q8_0 weights on a random model: ~3% of the logit range
  CHECK(agree >= total * 9 / 10);
}

TEST_CASE("a row's logits do not depend on the batch, the chunking or the thread count") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = gemma::load_weights(file);
  std::int64_t const V = o.vocab;
  // Reference: each prompt alone, one thread, one forward for the whole prompt.
  std::vector<std::vector<float>> solo;
  for (auto const& p : o.prompts) {
    gemma::generator g(w, 64, 1, 4);
    auto l = g.feed(p);
    solo.emplace_back(l.begin(), l.end());
  }
  for (int threads : {1, 2, 3}) {
    gemma::gemma3_forward fwd(w, {48, 4}, threads);
    // Three streams in one batch, with interleaved page ids; stream 1 goes token by token.
    std::vector<std::vector<std::int32_t>> tables(3);
    for (int i = 0; i < 16; ++i)
      for (int s = 0; s < 3; ++s) tables[static_cast<std::size_t>(s)].push_back(i * 3 + s);
    auto const& p0 = o.prompts[0];
    auto const& p1 = o.prompts[1];
    auto const& p2 = o.prompts[2];
    // Round 1: prompt 0 whole, first token of prompt 1, first half of prompt 2.
    std::size_t const half = p2.size() / 2;
    std::vector<gemma::batch_row> rows{{p0, 0, tables[0], false},
                                       {std::span(p1).first(1), 0, tables[1], false},
                                       {std::span(p2).first(half), 0, tables[2], false}};
    std::vector<float> out(3 * static_cast<std::size_t>(V));
    fwd.forward(rows, out.data());
    CHECK(std::equal(out.begin(), out.begin() + V, solo[0].begin()));
    // Then prompt 1 token by token alongside the rest of prompt 2.
    for (std::size_t i = 1; i < p1.size(); ++i) {
      std::vector<gemma::batch_row> r2{
          {std::span(p1).subspan(i, 1), static_cast<std::int32_t>(i), tables[1], false}};
      if (i == 1)
        r2.push_back(
            {std::span(p2).subspan(half), static_cast<std::int32_t>(half), tables[2], true});
      std::vector<float> o2(static_cast<std::size_t>(gemma::gemma3_forward::logits_rows(r2) * V));
      fwd.forward(r2, o2.data());
      if (i == 1) {
        auto tail = std::span<float const>(o2).subspan(o2.size() - static_cast<std::size_t>(V));
        INFO("threads " << threads << ": prompt 2 in two chunks");
        CHECK(std::equal(tail.begin(), tail.end(), solo[2].begin()));
      }
      if (i + 1 == p1.size()) {
        INFO("threads " << threads << ": prompt 1 token by token");
        CHECK(std::equal(o2.begin(), o2.begin() + V, solo[1].begin()));
      }
    }
  }
}

TEST_CASE("bad batches throw tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  gemma::gemma3_forward fwd(gemma::load_weights(file), {4, 4}, 1);
  std::vector<float> out(512 * 2);
  std::vector<std::int32_t> toks{1, 2, 3};
  std::vector<std::int32_t> pages{0};
  std::vector<std::int32_t> pages2{0, 9};
  std::vector<std::int32_t> bad_tok{600};
  std::vector<gemma::batch_row> none;
  CHECK_THROWS_AS(fwd.forward(none, out.data()), tf::error);
  gemma::batch_row too_far{toks, 3, pages};
  CHECK_THROWS_AS(fwd.forward({&too_far, 1}, out.data()), tf::error);
  gemma::batch_row bad_page{toks, 3, pages2};
  CHECK_THROWS_AS(fwd.forward({&bad_page, 1}, out.data()), tf::error);
  gemma::batch_row vocab{bad_tok, 0, pages};
  CHECK_THROWS_AS(fwd.forward({&vocab, 1}, out.data()), tf::error);
  gemma::batch_row neg{toks, -1, pages};
  CHECK_THROWS_AS(fwd.forward({&neg, 1}, out.data()), tf::error);
  CHECK_THROWS_AS(gemma::gemma3_forward(gemma::load_weights(file), {0, 4}, 1), tf::error);
}
