// Qwen3 forward against transformers' fp32 logits on a tiny random-weight model
// (fixtures/qwen/tiny, made by fixtures/scripts/make_qwen_tiny.py), from GGUF and safetensors.
#include <families/cpu_entries.hpp>
#include <families/qwen/qwen3_entry.hpp>
#include <families/qwen/qwen3_forward.hpp>
#include <families/qwen/qwen3_load.hpp>
#include <tf/model/gguf.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
using tf::families::batch_row;
using tf::model::model_file;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/qwen/tiny";

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

// One stream over a forward with pages 0..n-1; `all` asks for logits at every token.
struct stream {
  qwen::qwen3_forward& fwd;
  std::vector<std::int32_t> pages;
  std::int32_t pos = 0;

  explicit stream(qwen::qwen3_forward& f)
      : fwd(f), pages(static_cast<std::size_t>(f.kv().num_pages)) {
    std::iota(pages.begin(), pages.end(), 0);
  }
  std::vector<float> feed(std::span<std::int32_t const> toks, bool all) {
    batch_row row{toks, pos, pages, all};
    std::vector<float> out(
        static_cast<std::size_t>(qwen::qwen3_forward::logits_rows({&row, 1}) * fwd.vocab_size()));
    fwd.forward({&row, 1}, out.data());
    pos += static_cast<std::int32_t>(toks.size());
    return out;
  }
};

// Logits for every prompt position, and the greedy continuation, compared with the oracle.
void check_against_oracle(std::string const& path, float tol, tf::families::kv_dtype dtype) {
  auto const& o = load_oracle();
  auto file = model_file::open(path);
  auto w = qwen::load_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK_FALSE(w.hp.tie_word_embeddings);
  CHECK(w.output.data != w.embd.data);
  qwen::qwen3_forward fwd(w, {16, 4, dtype}, 2);  // small pages so rows cross page boundaries
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    stream s(fwd);
    auto all = s.feed(o.prompts[p], true);
    float err = max_abs_diff(all, o.logits[p]);
    INFO(path << " prompt " << p << " max |tf - transformers| = " << err << " (tolerance " << tol
              << ")");
    CHECK(err <= tol);
    std::vector<std::int32_t> got;
    std::vector<float> cur(all.end() - o.vocab, all.end());
    for (std::size_t i = 0; i < o.greedy[p].size(); ++i) {
      auto t = argmax(cur);
      got.push_back(t);
      cur = s.feed({&t, 1}, false);
    }
    CHECK(got.size() == 16);
    CHECK(got == o.greedy[p]);
  }
}

}  // namespace

TEST_CASE("tiny Qwen3, F32 GGUF: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny + "/tiny-f32.gguf", 1e-4f, tf::families::kv_dtype::f32);
}

TEST_CASE("tiny Qwen3, HF safetensors: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny, 1e-4f, tf::families::kv_dtype::f32);
}

TEST_CASE("tiny Qwen3, F32 GGUF with f16 KV: logits within 2e-2 of transformers") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  qwen::qwen3_forward fwd(qwen::load_weights(file), {16, 4, tf::families::kv_dtype::f16}, 1);
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    stream s(fwd);
    auto all = s.feed(o.prompts[p], true);
    float err = max_abs_diff(all, o.logits[p]);
    INFO("f16 KV prompt " << p << " max err " << err);
    CHECK(err <= 2e-2f);  // f16 rounding of K, V, q and the probabilities
  }
}

TEST_CASE("tiny Qwen3, Q8_0 GGUF: logits within 0.25 of transformers, top-1 at >= 90%") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  qwen::qwen3_forward fwd(qwen::load_weights(file), {64, 4}, 1);
  float worst = 0;
  int agree = 0, total = 0;
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    stream s(fwd);
    auto all = s.feed(o.prompts[p], true);
    worst = std::max(worst, max_abs_diff(all, o.logits[p]));
    auto const V = static_cast<std::size_t>(o.vocab);
    for (std::size_t t = 0; t < o.prompts[p].size(); ++t) {
      agree += argmax(std::span<float const>(all).subspan(t * V, V)) ==
               argmax(std::span<float const>(o.logits[p]).subspan(t * V, V));
      ++total;
    }
  }
  INFO("Q8_0 max |tf - transformers| = " << worst << ", top-1 agrees at " << agree << "/" << total);
  CHECK(worst <= 0.25f);  // Q8_0 weights on a random model
  CHECK(agree >= total * 9 / 10);
}

TEST_CASE("a Qwen3 row's logits do not depend on the batch, the chunking or the thread count") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = qwen::load_weights(file);
  std::int64_t const V = o.vocab;
  std::vector<std::vector<float>> solo;  // each prompt alone, one thread, one forward
  {
    qwen::qwen3_forward f1(w, {16, 4}, 1);
    for (auto const& p : o.prompts) solo.push_back(stream(f1).feed(p, false));
  }
  for (int threads : {1, 2}) {
    qwen::qwen3_forward fwd(w, {48, 4}, threads);
    std::vector<std::vector<std::int32_t>> tables(3);
    for (int i = 0; i < 16; ++i)
      for (int s = 0; s < 3; ++s) tables[static_cast<std::size_t>(s)].push_back(i * 3 + s);
    auto const& p0 = o.prompts[0];
    auto const& p1 = o.prompts[1];
    auto const& p2 = o.prompts[2];
    std::size_t const half = p2.size() / 2;
    std::vector<batch_row> rows{{p0, 0, tables[0], false},
                                {std::span(p1).first(1), 0, tables[1], false},
                                {std::span(p2).first(half), 0, tables[2], false}};
    std::vector<float> out(3 * static_cast<std::size_t>(V));
    fwd.forward(rows, out.data());
    INFO("threads " << threads);
    CHECK(std::equal(out.begin(), out.begin() + V, solo[0].begin()));
    for (std::size_t i = 1; i < p1.size(); ++i) {
      std::vector<batch_row> r2{
          {std::span(p1).subspan(i, 1), static_cast<std::int32_t>(i), tables[1], false}};
      if (i == 1)
        r2.push_back(
            {std::span(p2).subspan(half), static_cast<std::int32_t>(half), tables[2], true});
      std::vector<float> o2(static_cast<std::size_t>(qwen::qwen3_forward::logits_rows(r2) * V));
      fwd.forward(r2, o2.data());
      if (i == 1) {
        auto tail = std::span<float const>(o2).subspan(o2.size() - static_cast<std::size_t>(V));
        CHECK(std::equal(tail.begin(), tail.end(), solo[2].begin()));
      }
      if (i + 1 == p1.size()) CHECK(std::equal(o2.begin(), o2.begin() + V, solo[1].begin()));
    }
  }
}

TEST_CASE("bad Qwen3 batches throw tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  qwen::qwen3_forward fwd(qwen::load_weights(file), {4, 4}, 1);
  std::vector<float> out(1200 * 2);
  std::vector<std::int32_t> toks{1, 2, 3}, pages{0}, pages2{0, 9}, bad_tok{1200};
  std::vector<batch_row> none;
  CHECK_THROWS_AS(fwd.forward(none, out.data()), tf::error);
  batch_row too_far{toks, 3, pages};
  CHECK_THROWS_AS(fwd.forward({&too_far, 1}, out.data()), tf::error);
  batch_row bad_page{toks, 3, pages2};
  CHECK_THROWS_AS(fwd.forward({&bad_page, 1}, out.data()), tf::error);
  batch_row vocab{bad_tok, 0, pages};
  CHECK_THROWS_AS(fwd.forward({&vocab, 1}, out.data()), tf::error);
  CHECK_THROWS_AS(qwen::qwen3_forward(qwen::load_weights(file), {0, 4}, 1), tf::error);
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
      qwen::bind_weights(f, h, qwen::name_style::gguf);
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
  auto w = qwen::bind_weights(missing{g, "output.weight"}, tied, qwen::name_style::gguf);
  CHECK(w.output.data == w.embd.data);
}

TEST_CASE("the CPU entry list runs the Qwen3 GGUF as qwen3") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  CHECK(qwen::qwen3_cpu::accepts("qwen3"));
  CHECK_FALSE(qwen::qwen3_cpu::accepts("qwen3moe"));
  auto name = tf::families::dispatch_cpu(
      "qwen3", [](auto t) { return std::string(decltype(t)::type::name); });
  CHECK(name == "qwen3");
  // 2 layers x 2 KV heads x 16 x (K and V) x 4 bytes
  CHECK(qwen::qwen3_cpu::kv_bytes_per_token(file, tf::families::kv_dtype::f32) ==
        2 * 2 * 16 * 2 * 4);
  CHECK(qwen::qwen3_cpu::context_length(file) == 256);
}
