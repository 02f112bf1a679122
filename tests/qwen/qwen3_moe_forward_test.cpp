// Qwen3-MoE forward against transformers' fp32 logits on a tiny random-weight model
// (fixtures/qwen/tiny_moe, made by fixtures/scripts/make_qwen_moe_tiny.py: 8 experts, top-2,
// layer 1 dense), from GGUF (stacked experts) and safetensors (per-expert tensors).
#include <families/qwen/qwen3_moe.hpp>
#include <families/registry.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/model/gguf.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
using tf::batch_row;
using tf::model::model_file;
using tf::test::max_abs_diff;
using engine = tf::engine<qwen::qwen3_moe, tf::backend::cpu>;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/qwen/tiny_moe";

using stream = tf::test::stream<engine>;

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

qwen::qwen3_moe_weights<tf::backend::cpu> load_moe_weights(model_file const& file) {
  return qwen::load_moe_weights(file, binder);
}

void check_against_oracle(std::string const& path, float tol) {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(path);
  auto w = load_moe_weights(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.num_experts == 8);
  CHECK(w.hp.num_experts_per_tok == 2);
  REQUIRE(w.layers.size() == 3);
  CHECK(w.layers[0].moe.experts.size() == 8);
  CHECK(w.layers[1].moe.experts.empty());  // mlp_only_layers = [1]
  CHECK(w.layers[2].moe.experts.size() == 8);
  engine fwd(w, {16, 4}, {2});
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

TEST_CASE("the tiny Qwen3-MoE prompts route tokens to more than one expert set") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  for (auto const& e : o.entries)
    for (auto const& [layer, picks] : e.at("experts").items()) {
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
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  engine fwd(load_moe_weights(file), {64, 4}, {1});
  auto const fit =
      tf::test::fit_to(o, [&](std::size_t p) { return stream(fwd).feed(o.prompts[p], true); });
  INFO("Q8_0 " << fit);
  CHECK(fit.worst <= 0.25f);  // Q8_0 weights on a random model
  CHECK(fit.agree >= fit.total * 9 / 10);
}

TEST_CASE("a Qwen3-MoE row's logits do not depend on the batch or the thread count") {
  auto const& o = tf::test::hf_oracle_at(tiny);
  auto file = model_file::open(tiny + "/tiny-q8_0.gguf");
  auto w = load_moe_weights(file);
  std::int64_t const V = o.vocab;
  std::vector<std::vector<float>> solo;
  {
    engine f1(w, {16, 4}, {1});
    for (auto const& p : o.prompts) solo.push_back(stream(f1).feed(p, false));
  }
  for (int threads : {1, 2}) {
    engine fwd(w, {32, 4}, {threads});
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
      qwen::bind_moe_weights(f, h, qwen::name_style::gguf, binder);
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

TEST_CASE("the family registry runs the Qwen3-MoE GGUF as qwen3_moe on the CPU") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto accepts = [](std::string_view arch) {
    return std::ranges::find(qwen::qwen3_moe::arch_names, arch) !=
           qwen::qwen3_moe::arch_names.end();
  };
  CHECK(accepts("qwen3moe"));
  CHECK(accepts("qwen3_moe"));
  CHECK_FALSE(accepts("qwen3"));
  STATIC_REQUIRE(tf::has_forward<qwen::qwen3_moe, tf::backend::cpu>);
  auto name = tf::families::dispatch("qwen3moe",
                                     [](auto t) { return std::string(decltype(t)::type::name); });
  CHECK(name == "qwen3_moe");
  // 3 layers x 2 KV heads x 16 x (K and V) x 4 bytes
  CHECK(engine::kv_bytes_per_token(file, tf::kv_dtype::f32) == 3 * 2 * 16 * 2 * 4);
}
