// Qwen3-MoE forward against transformers' fp32 logits on a tiny random-weight model
// (fixtures/qwen/tiny_moe, made by fixtures/scripts/make_qwen_moe_tiny.py: 8 experts, top-2,
// layer 1 dense), from GGUF (stacked experts) and safetensors (per-expert tensors).
#include <families/cpu_entries.hpp>
#include <families/qwen/qwen3_moe_entry.hpp>
#include <families/qwen/qwen3_moe_load.hpp>
#include <tf/model/gguf.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
using tf::families::batch_row;
using tf::model::model_file;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/qwen/tiny_moe";

struct oracle {
  int vocab = 0;
  std::vector<std::vector<std::int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // per prompt [T, vocab]
  nlohmann::json routing;                  // per prompt: layer -> [T][k] experts picked
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
      r.routing.push_back(p.at("experts"));
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

struct stream {
  qwen::qwen3_moe_forward& fwd;
  std::vector<std::int32_t> pages;
  std::int32_t pos = 0;

  explicit stream(qwen::qwen3_moe_forward& f)
      : fwd(f), pages(static_cast<std::size_t>(f.kv().num_pages)) {
    std::iota(pages.begin(), pages.end(), 0);
  }
  std::vector<float> feed(std::span<std::int32_t const> toks, bool all) {
    batch_row row{toks, pos, pages, all};
    std::vector<float> out(static_cast<std::size_t>(
        qwen::qwen3_moe_forward::logits_rows({&row, 1}) * fwd.vocab_size()));
    fwd.forward({&row, 1}, out.data());
    pos += static_cast<std::int32_t>(toks.size());
    return out;
  }
};

void check_against_oracle(std::string const& path, float tol) {
  auto const& o = load_oracle();
  auto file = model_file::open(path);
  auto w = qwen::load_moe_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.num_experts == 8);
  CHECK(w.hp.num_experts_per_tok == 2);
  REQUIRE(w.layers.size() == 3);
  CHECK(w.layers[0].experts.size() == 8);
  CHECK(w.layers[1].experts.empty());  // mlp_only_layers = [1]
  CHECK(w.layers[2].experts.size() == 8);
  qwen::qwen3_moe_forward fwd(w, {16, 4}, 2);
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

TEST_CASE("the tiny Qwen3-MoE prompts route tokens to more than one expert set") {
  auto const& o = load_oracle();
  for (auto const& r : o.routing)
    for (auto const& [layer, picks] : r.items()) {
      std::set<std::vector<int>> sets;
      for (auto const& t : picks) {
        auto v = t.get<std::vector<int>>();
        std::sort(v.begin(), v.end());
        sets.insert(v);
      }
      INFO("layer " << layer);
      CHECK(sets.size() > 1);
    }
}

TEST_CASE("tiny Qwen3-MoE, F32 GGUF: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny + "/tiny-f32.gguf", 1e-4f);
}

TEST_CASE("tiny Qwen3-MoE, HF safetensors: logits within 1e-4 of transformers, greedy exact") {
  check_against_oracle(tiny, 1e-4f);
}

TEST_CASE("tiny Qwen3-MoE, Q8_0 GGUF: logits within 0.25 of transformers, top-1 at >= 90%") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  qwen::qwen3_moe_forward fwd(qwen::load_moe_weights(file), {64, 4}, 1);
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

TEST_CASE("a Qwen3-MoE row's logits do not depend on the batch or the thread count") {
  auto const& o = load_oracle();
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = qwen::load_moe_weights(file);
  std::int64_t const V = o.vocab;
  std::vector<std::vector<float>> solo;
  {
    qwen::qwen3_moe_forward f1(w, {16, 4}, 1);
    for (auto const& p : o.prompts) solo.push_back(stream(f1).feed(p, false));
  }
  for (int threads : {1, 2}) {
    qwen::qwen3_moe_forward fwd(w, {32, 4}, threads);
    std::vector<std::vector<std::int32_t>> tables(2);
    for (int i = 0; i < 16; ++i)
      for (int s = 0; s < 2; ++s) tables[static_cast<std::size_t>(s)].push_back(i * 2 + s);
    std::vector<batch_row> rows{{o.prompts[0], 0, tables[0], false},
                                {o.prompts[1], 0, tables[1], false}};
    std::vector<float> out(2 * static_cast<std::size_t>(V));
    fwd.forward(rows, out.data());
    INFO("threads " << threads);
    CHECK(std::equal(out.begin(), out.begin() + V, solo[0].begin()));
    CHECK(std::equal(out.begin() + V, out.end(), solo[1].begin()));
  }
}

TEST_CASE("a Qwen3-MoE GGUF missing an expert tensor names it in the tf::error") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto const* g = file.gguf();
  REQUIRE(g);
  auto hp = qwen::moe_hparams_from_gguf(*g);
  CHECK(hp.mlp_only_layers == std::vector<int>{1});
  struct missing {
    decltype(g) inner;
    std::string drop;
    auto const* find_tensor(std::string_view n) const {
      return n == drop ? nullptr : inner->find_tensor(n);
    }
  };
  auto msg_of = [&](auto const& f, qwen::qwen3_moe_hparams const& h) {
    try {
      qwen::bind_moe_weights(f, h, qwen::name_style::gguf);
    } catch (tf::error const& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(msg_of(missing{g, "blk.2.ffn_up_exps.weight"}, hp),
             Catch::Contains("blk.2.ffn_up_exps.weight"));
  CHECK_THAT(msg_of(missing{g, "blk.0.ffn_gate_inp.weight"}, hp),
             Catch::Contains("blk.0.ffn_gate_inp.weight"));
  auto wrong = hp;
  wrong.moe_intermediate_size = 48;
  CHECK_THAT(msg_of(missing{g, ""}, wrong), Catch::Contains("blk.0.ffn_gate_exps.weight"));
  auto too_many = hp;
  too_many.num_experts_per_tok = 9;
  CHECK_THAT(msg_of(missing{g, ""}, too_many), Catch::Contains("top-9"));
}

TEST_CASE("the CPU entry list runs the Qwen3-MoE GGUF as qwen3_moe") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  CHECK(qwen::qwen3_moe_cpu::accepts("qwen3moe"));
  CHECK(qwen::qwen3_moe_cpu::accepts("qwen3_moe"));
  CHECK_FALSE(qwen::qwen3_moe_cpu::accepts("qwen3"));
  auto name = tf::families::dispatch_cpu(
      "qwen3moe", [](auto t) { return std::string(decltype(t)::type::name); });
  CHECK(name == "qwen3_moe");
  // 3 layers x 2 KV heads x 16 x (K and V) x 4 bytes
  CHECK(qwen::qwen3_moe_cpu::kv_bytes_per_token(file, tf::families::kv_dtype::f32) ==
        3 * 2 * 16 * 2 * 4);
}
