// GLM-4.5 MoE forward against transformers' fp32 logits and expert picks on a tiny random-weight
// model (fixtures/glm/tiny45, made by fixtures/scripts/make_glm_moe_tiny.py), from GGUF and
// safetensors.
#include <families/glm/glm4_moe_entry.hpp>
#include <families/glm/glm4_moe_forward.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace glm = tf::families::glm;
using tf::families::batch_row;
using tf::model::model_file;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/glm/tiny45";

struct oracle {
  int vocab = 0;
  std::vector<std::vector<std::int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // per prompt [T, vocab]
  // per prompt, per MoE layer: per position the sorted expert ids transformers picked
  std::vector<std::vector<std::vector<std::vector<std::int32_t>>>> experts;
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
      std::vector<std::vector<std::vector<std::int32_t>>> ex;
      for (auto const& [layer, picks] : p.at("experts").items())
        ex.push_back(picks.get<std::vector<std::vector<std::int32_t>>>());
      r.experts.push_back(std::move(ex));
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

// One stream over a forward: the prompt with every position's logits, then one token at a time.
struct stream {
  glm::glm4_moe_forward& fwd;
  std::vector<std::int32_t> pages;
  std::int32_t pos = 0;

  std::vector<float> feed(std::span<std::int32_t const> toks, bool all) {
    batch_row row{toks, pos, pages, all};
    std::vector<float> out(
        static_cast<std::size_t>(glm::glm4_moe_forward::logits_rows({&row, 1}) * fwd.vocab_size()));
    fwd.forward({&row, 1}, out.data());
    pos += static_cast<std::int32_t>(toks.size());
    return out;
  }
};

std::vector<std::int32_t> page_ids(int n) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(n - 1 - i);  // reversed, so page order matters
  return p;
}

// tf's expert picks match transformers' at every position, and more than one set is chosen.
void check_routes(glm::glm4_moe_forward const& fwd,
                  std::vector<std::vector<std::vector<std::int32_t>>> const& want, std::size_t T) {
  int const K = fwd.hparams().experts_per_tok;
  auto const& got = fwd.routes();
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
  auto const& o = load_oracle();
  auto file = model_file::open(path);
  auto w = glm::load_moe_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.rope_dims == 8);
  float worst = 0;
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    glm::glm4_moe_forward fwd(w, {16, 4}, 1);  // small pages so rows cross page boundaries
    fwd.record_routes(true);
    stream s{fwd, page_ids(16)};
    auto all = s.feed(o.prompts[p], true);
    check_routes(fwd, o.experts[p], o.prompts[p].size());
    fwd.record_routes(false);
    float const err = max_abs_diff(all, o.logits[p]);
    worst = std::max(worst, err);
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
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = glm::load_moe_weights(file);
  CHECK(w.embd.type == tf::model::tensor_type::q8_0);
  float worst = 0;
  int agree = 0, total = 0;
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    glm::glm4_moe_forward fwd(w, {16, 4}, 1);
    stream s{fwd, page_ids(16)};
    auto all = s.feed(o.prompts[p], true);
    worst = std::max(worst, max_abs_diff(all, o.logits[p]));
    for (std::size_t t = 0; t < o.prompts[p].size(); ++t) {
      auto const V = static_cast<std::size_t>(o.vocab);
      agree += argmax(std::span<float const>(all).subspan(t * V, V)) ==
               argmax(std::span<float const>(o.logits[p]).subspan(t * V, V));
      ++total;
    }
  }
  INFO("Q8_0 max |tf - transformers| = " << worst << ", top-1 agrees at " << agree << "/" << total);
  // Q8_0 expert weights flip near-tied routing choices on a random model, and a flipped expert
  // moves that position's logits by O(1); the router itself stays F32, as llama.cpp keeps it.
  CHECK(worst <= 1.5f);
  CHECK(agree >= total * 3 / 4);
}

TEST_CASE(
    "a GLM-4.5 MoE row's logits do not depend on the batch, the chunking or the thread count") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = glm::load_moe_weights(file);
  std::int64_t const V = o.vocab;
  std::vector<std::vector<float>> solo;
  for (auto const& p : o.prompts) {
    glm::glm4_moe_forward f(w, {16, 4}, 1);
    stream s{f, page_ids(16)};
    solo.push_back(s.feed(p, false));
  }
  for (int threads : {1, 2}) {
    glm::glm4_moe_forward fwd(w, {48, 4}, threads);
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
      std::vector<float> o2(static_cast<std::size_t>(glm::glm4_moe_forward::logits_rows(r2) * V));
      fwd.forward(r2, o2.data());
      if (i == 1) {
        auto tail = std::span<float const>(o2).subspan(o2.size() - static_cast<std::size_t>(V));
        CHECK(std::equal(tail.begin(), tail.end(), solo[2].begin()));
      }
      if (i + 1 == p1.size()) CHECK(std::equal(o2.begin(), o2.begin() + V, solo[1].begin()));
    }
  }
}

TEST_CASE("GLM-4.5 MoE f16 KV stays close to f32 KV") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto w = glm::load_moe_weights(file);
  glm::glm4_moe_forward f32(w, {16, 4, tf::families::kv_dtype::f32}, 1);
  glm::glm4_moe_forward f16(w, {16, 4, tf::families::kv_dtype::f16}, 1);
  stream a{f32, page_ids(16)}, b{f16, page_ids(16)};
  auto la = a.feed(o.prompts[0], true);
  auto lb = b.feed(o.prompts[0], true);
  CHECK(max_abs_diff(la, lb) <= 0.05f);
}

TEST_CASE(
    "GLM-4.5 MoE entry: accepts glm4moe and glm4_moe, leaves out the MTP layer, sizes KV, and "
    "builds a forward") {
  using entry = glm::glm4_moe_cpu;
  CHECK(entry::accepts("glm4moe"));
  CHECK(entry::accepts("glm4_moe"));
  CHECK_FALSE(entry::accepts("glm4"));
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  CHECK(entry::kv_bytes_per_token(file, tf::families::kv_dtype::f32) ==
        3u * 2 * 2 * 16 * 4);  // 3 decoder layers; block_count 4 counts MTP
  CHECK(entry::context_length(file) == 256);
  auto fwd = entry::make(file, {4, 16}, 1);
  CHECK(fwd->vocab_size() == 1200);  // the toy GLM-4 tokenizer's vocabulary
}

TEST_CASE("bad GLM-4.5 MoE batches throw tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  glm::glm4_moe_forward fwd(glm::load_moe_weights(file), {4, 4}, 1);
  auto const V = fwd.vocab_size();
  std::vector<float> out(static_cast<std::size_t>(V) * 2);
  std::vector<std::int32_t> toks{1, 2, 3};
  std::vector<std::int32_t> pages{0};
  std::vector<std::int32_t> pages2{0, 9};
  std::vector<std::int32_t> bad_tok{static_cast<std::int32_t>(V)};
  std::vector<batch_row> none;
  CHECK_THROWS_AS(fwd.forward(none, out.data()), tf::error);
  batch_row too_far{toks, 3, pages};
  CHECK_THROWS_AS(fwd.forward({&too_far, 1}, out.data()), tf::error);
  batch_row bad_page{toks, 3, pages2};
  CHECK_THROWS_AS(fwd.forward({&bad_page, 1}, out.data()), tf::error);
  batch_row vocab{bad_tok, 0, pages};
  CHECK_THROWS_AS(fwd.forward({&vocab, 1}, out.data()), tf::error);
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
      CHECK_THROWS_WITH(glm::bind_moe_weights(d, hp, true), Catch::Contains(name));
    }
  }
}
