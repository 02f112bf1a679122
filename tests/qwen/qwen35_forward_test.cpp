// Qwen3.5 (qwen35) and Qwen3.5-MoE (qwen35moe) forwards against transformers' fp32 logits on
// tiny random-weight hybrids (fixtures/qwen/tiny35 and tiny35_moe, made by
// fixtures/scripts/make_qwen35_tiny.py: layers GDN, GDN, GDN, attention, GDN; prompts of 21 and
// 150 tokens, the second over three of HF's 64-token GDN chunks), from safetensors, F32 GGUF
// (value heads tiled) and Q8_0 GGUF; then the recurrent state's invariants: a prompt fed in
// chunks of 1, 7, 64 or whole, alone or in a batch beside other streams' slots, gives the same
// bits.
#include <families/qwen/qwen35.hpp>
#include <families/qwen/qwen35_moe.hpp>
#include <families/registry.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tests/qwen/edited_file.hpp>
#include <tests/qwen/hybrid_session.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/open.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace hybrid = tf::test::hybrid;
namespace qwen = tf::families::qwen;
using hybrid::shape;
using hybrid::slot_stream;
using tf::model::model_file;
using tf::test::edited_file;
using dense_engine = tf::engine<qwen::qwen35, tf::backend::cpu>;
using moe_engine = tf::engine<qwen::qwen35_moe, tf::backend::cpu>;

namespace {

std::string const dense_dir = std::string(TF_FIXTURES_DIR) + "/qwen/tiny35";
std::string const moe_dir = std::string(TF_FIXTURES_DIR) + "/qwen/tiny35_moe";

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

qwen::qwen35_weights<tf::backend::cpu> load(model_file const& file) {
  return qwen::load_qwen35_weights(file, binder);
}

/// The weights of `path` (the fixture in `dir`) against transformers: hybrid::check_oracle.
template <class Engine>
void check_oracle(std::string const& dir, std::string const& path, float tol, bool exact) {
  auto const& o = tf::test::hf_oracle_at(dir);
  auto file = model_file::open(path);
  auto const w = load(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.tiled_v_heads == file.is_gguf());
  REQUIRE(w.layers.size() == 5);
  hybrid::check_oracle<Engine>(w, o, path, tol, exact);
}

}  // namespace

TEST_CASE("tiny Qwen3.5, HF safetensors: logits within 1e-4 of transformers, greedy exact") {
  check_oracle<dense_engine>(dense_dir, dense_dir, 1e-4f, true);
}

TEST_CASE("tiny Qwen3.5, F32 GGUF (tiled value heads): logits within 1e-4, greedy exact") {
  check_oracle<dense_engine>(dense_dir, dense_dir + "/tiny-f32.gguf", 1e-4f, true);
}

// Q8_0 weights and activations: about 0.1 from transformers' fp32 (F32 files: within 1e-5) on
// this random model, whose logits move about 16x a relative change of its embedding.
TEST_CASE("tiny Qwen3.5, Q8_0 GGUF: logits within 0.25 of transformers, top-1 at >= 90%") {
  check_oracle<dense_engine>(dense_dir, dense_dir + "/tiny-q8_0.gguf", 0.25f, false);
}

TEST_CASE("tiny Qwen3.5-MoE, HF safetensors: logits within 1e-4 of transformers, greedy exact") {
  check_oracle<moe_engine>(moe_dir, moe_dir, 1e-4f, true);
}

TEST_CASE("tiny Qwen3.5-MoE, F32 GGUF (tiled value heads): logits within 1e-4, greedy exact") {
  check_oracle<moe_engine>(moe_dir, moe_dir + "/tiny-f32.gguf", 1e-4f, true);
}

TEST_CASE("tiny Qwen3.5-MoE, Q8_0 GGUF: logits within 0.25 of transformers, top-1 at >= 90%") {
  check_oracle<moe_engine>(moe_dir, moe_dir + "/tiny-q8_0.gguf", 0.25f, false);
}

TEST_CASE("a Qwen3.5 prompt fed in chunks of 1, 7, 64 or whole gives the same bits") {
  auto const& dense = tf::test::hf_oracle_at(dense_dir).prompts[1];
  hybrid::check_chunking<dense_engine>(dense_dir + "/tiny-f32.gguf", load, dense);
  hybrid::check_chunking<dense_engine>(dense_dir + "/tiny-q8_0.gguf", load, dense);
  hybrid::check_chunking<moe_engine>(moe_dir, load, tf::test::hf_oracle_at(moe_dir).prompts[1]);
}

TEST_CASE("a Qwen3.5 stream in a batch beside other state slots gives its bits alone") {
  hybrid::check_batch<dense_engine>(dense_dir + "/tiny-q8_0.gguf", load,
                                    tf::test::hf_oracle_at(dense_dir));
  hybrid::check_batch<moe_engine>(moe_dir + "/tiny-f32.gguf", load,
                                  tf::test::hf_oracle_at(moe_dir));
}

TEST_CASE("the tiny Qwen3.5-MoE routes each token to transformers' experts") {
  auto const& o = tf::test::hf_oracle_at(moe_dir);
  for (auto const& path : {moe_dir, moe_dir + "/tiny-f32.gguf"}) {
    auto file = model_file::open(path);
    moe_engine fwd(load(file), shape(11, 1), {1});
    fwd.backend().record_routes(true);
    for (std::size_t p = 0; p < o.prompts.size(); ++p) {
      fwd.backend().clear_routes();
      slot_stream<moe_engine>{fwd}.feed(o.prompts[p], false);
      auto const& routes = fwd.backend().routes();
      REQUIRE(routes.size() == 5);  // every layer routes
      std::set<std::vector<int>> sets;
      for (auto const& [layer, picks] : o.entries[p].at("experts").items()) {
        std::vector<std::int32_t> want;
        for (auto const& t : picks)
          for (auto e : t) want.push_back(e.get<std::int32_t>());
        INFO(path << " prompt " << p << " layer " << layer);
        CHECK(routes[static_cast<std::size_t>(std::stoi(layer))] == want);
        for (std::size_t t = 0; t + 1 < want.size(); t += 2)
          sets.insert({std::min(want[t], want[t + 1]), std::max(want[t], want[t + 1])});
      }
      CHECK(sets.size() > 1);
    }
  }
}

TEST_CASE("tf::open runs the Qwen3.5 files through the registry: greedy tokens as transformers") {
  for (auto const& [dir, family] :
       {std::pair{dense_dir, "qwen35"}, std::pair{moe_dir, "qwen35_moe"}}) {
    auto const& o = tf::test::hf_oracle_at(dir);
    for (auto const& path : {dir + "/tiny-f32.gguf", dir}) {
      INFO(path);
      tf::open_options opt;
      opt.kv = tf::kv_dtype::f32;
      auto m = tf::open(path, opt);
      CHECK(m->family() == family);
      CHECK(m->kv().num_state_slots == 1);
      CHECK((m->codec() != nullptr) == (path != dir));  // the GGUFs carry the qwen35 tokenizer
      auto const out = m->generate(std::span<std::int32_t const>(o.prompts[1]), {}, 16, {}, false);
      CHECK(out.tokens == o.greedy[1]);
    }
  }
}

TEST_CASE("the registry answers the Qwen3.5 architecture names; KV and state sizes") {
  auto family_of = [](std::string_view arch) {
    return tf::families::dispatch(arch,
                                  [](auto t) { return std::string(decltype(t)::type::name); });
  };
  for (auto arch : {"qwen35", "qwen3_5", "qwen3_5_text"}) CHECK(family_of(arch) == "qwen35");
  for (auto arch : {"qwen35moe", "qwen3_5_moe", "qwen3_5_moe_text"})
    CHECK(family_of(arch) == "qwen35_moe");
  STATIC_REQUIRE(tf::has_forward<qwen::qwen35, tf::backend::cpu>);
  STATIC_REQUIRE(tf::has_forward<qwen::qwen35_moe, tf::backend::cpu>);
  STATIC_REQUIRE(dense_engine::has_state);
  for (auto const& path : {dense_dir + "/tiny-f32.gguf", moe_dir, dense_dir}) {
    INFO(path);
    auto file = model_file::open(path);
    // one attention layer x 2 KV heads x 64 x (K and V) x 4 bytes
    CHECK(dense_engine::kv_bytes_per_token(file, tf::kv_dtype::f32) == 1 * 2 * 64 * 2 * 4);
    // four GDN layers x (conv window 3 x 128 + delta state 4 x 16 x 16) x 4 bytes
    CHECK(dense_engine::state_bytes_per_stream(file) == 4 * (3 * 128 + 4 * 16 * 16) * 4);
  }
}

TEST_CASE("a Qwen3.5 file missing a tensor names it in the tf::error") {
  auto message_of = [](auto const& f, qwen::qwen35_hparams const& hp, qwen::name_style style) {
    try {
      qwen::bind_qwen35_weights(f, hp, style, binder);
    } catch (tf::error const& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto dense = model_file::open(dense_dir + "/tiny-f32.gguf");
  auto const hp = qwen::qwen35_hparams_from_gguf(*dense.gguf());
  for (std::string name : {"blk.0.ssm_alpha.weight", "blk.4.attn_gate.weight", "blk.2.ssm_a",
                           "blk.3.attn_q.weight", "blk.1.ssm_conv1d.weight", "output.weight"})
    CHECK_THAT(message_of(edited_file{dense, {name}, {}, {}}, hp, qwen::name_style::gguf),
               Catch::Contains(name));
  auto moe = model_file::open(moe_dir + "/tiny-f32.gguf");
  auto const mhp = qwen::qwen35_hparams_from_gguf(*moe.gguf());
  for (std::string name : {"blk.1.ffn_gate_inp_shexp.weight", "blk.2.ffn_up_exps.weight",
                           "blk.0.ffn_down_shexp.weight"})
    CHECK_THAT(message_of(edited_file{moe, {name}, {}, {}}, mhp, qwen::name_style::gguf),
               Catch::Contains(name));
  auto hf = model_file::open(moe_dir);
  auto const hhp = qwen::qwen35_hparams_from_config(hf.hf()->config());
  for (std::string name : {"model.layers.0.linear_attn.in_proj_b.weight",
                           "model.layers.3.mlp.experts.1.up_proj.weight",
                           "model.layers.4.mlp.shared_expert_gate.weight"})
    CHECK_THAT(message_of(edited_file{hf, {name}, {}, {}}, hhp, qwen::name_style::hf),
               Catch::Contains(name));
  auto wrong = hp;
  wrong.linear_value_head_dim = 32;  // the conv and the projections no longer fit
  CHECK_THAT(message_of(edited_file{dense, {}, {}, {}}, wrong, qwen::name_style::gguf),
             Catch::Contains("blk.0.attn_qkv.weight"));
}

TEST_CASE("a multimodal Qwen3.5 checkpoint's text model (model.language_model.*) loads") {
  // The fixture under the wrapper's names: model.X is found at model.language_model.X only.
  struct wrapper_names {
    tf::model::hf_model const& inner;
    tf::model::tensor_view const* find_tensor(std::string_view n) const {
      std::string_view const lm = "model.language_model.";
      if (n.starts_with(lm)) return inner.find_tensor("model." + std::string(n.substr(lm.size())));
      return n.starts_with("model.") ? nullptr : inner.find_tensor(n);
    }
  };
  auto const& o = tf::test::hf_oracle_at(moe_dir);
  auto file = model_file::open(moe_dir);
  auto const hp = qwen::qwen35_hparams_from_config(file.hf()->config());
  wrapper_names const names{*file.hf()};
  qwen::qwen35_hf_view<wrapper_names> const view{names, true};
  moe_engine plain(load(file), shape(11, 1), {1});
  moe_engine wrapped(qwen::bind_qwen35_weights(view, hp, qwen::name_style::hf, binder),
                     shape(11, 1), {1});
  CHECK(slot_stream<moe_engine>{wrapped}.feed(o.prompts[0], true) ==
        slot_stream<moe_engine>{plain}.feed(o.prompts[0], true));
  CHECK_THROWS_WITH(qwen::bind_qwen35_weights(qwen::qwen35_hf_view<wrapper_names>{names, false}, hp,
                                              qwen::name_style::hf, binder),
                    Catch::Contains("model.embed_tokens.weight"));
}

TEST_CASE("Qwen3.5-MoE experts stacked as gate|up in one tensor (GGUF and transformers 5)") {
  // The fixture's experts restacked: per expert its gate rows, then its up rows (GGUF
  // ffn_gate_up_exps {hidden, 2 ff, experts}; HF experts.gate_up_proj [experts, 2 ff, hidden]
  // and experts.down_proj [experts, hidden, ff]). The same weights give the same bits.
  // Adds `name` {cols, rows * parts per expert, experts}: expert e's rows of each part in turn.
  auto stack = [](edited_file& f, std::string const& name,
                  std::vector<std::vector<tf::model::tensor_view const*>> const& parts,
                  std::int64_t rows, std::int64_t cols) {
    std::vector<std::byte> b;
    std::size_t const n = rows * cols * 4;
    for (std::size_t e = 0; e < parts.size(); ++e)
      for (auto const* t : parts[e]) {
        REQUIRE(t->type == tf::model::tensor_type::f32);
        auto const* from = t->data + (t->dims.size() == 2 ? 0 : e * n);
        b.insert(b.end(), from, from + n);
      }
    f.add_f32(name,
              {cols, rows * static_cast<std::int64_t>(parts.front().size()),
               static_cast<std::int64_t>(parts.size())},
              std::move(b));
  };
  auto const& o = tf::test::hf_oracle_at(moe_dir);
  int const E = 4, ff = 32, h = 64;
  auto reference = [&](model_file const& f) {
    moe_engine fwd(load(f), shape(11, 1), {1});
    return slot_stream<moe_engine>{fwd}.feed(o.prompts[0], true);
  };
  auto gguf = model_file::open(moe_dir + "/tiny-f32.gguf");
  edited_file g{gguf, {}, {}, {}};
  for (int i = 0; i < 5; ++i) {
    auto const l = "blk." + std::to_string(i) + ".";
    auto const* gate = gguf.find_tensor(l + "ffn_gate_exps.weight");
    auto const* up = gguf.find_tensor(l + "ffn_up_exps.weight");
    stack(g, l + "ffn_gate_up_exps.weight", std::vector(E, std::vector{gate, up}), ff, h);
    g.hidden.insert(g.hidden.end(), {l + "ffn_gate_exps.weight", l + "ffn_up_exps.weight"});
  }
  auto const ghp = qwen::qwen35_hparams_from_gguf(*gguf.gguf());
  moe_engine gf(qwen::bind_qwen35_weights(g, ghp, qwen::name_style::gguf, binder), shape(11, 1),
                {1});
  CHECK(slot_stream<moe_engine>{gf}.feed(o.prompts[0], true) == reference(gguf));

  auto hf = model_file::open(moe_dir);
  edited_file f{hf, {}, {}, {}};
  for (int i = 0; i < 5; ++i) {
    auto const l = "model.layers." + std::to_string(i) + ".mlp.experts.";
    std::vector<std::vector<tf::model::tensor_view const*>> gate_up, down;
    for (int e = 0; e < E; ++e) {
      auto const x = l + std::to_string(e) + ".";
      gate_up.push_back(
          {hf.find_tensor(x + "gate_proj.weight"), hf.find_tensor(x + "up_proj.weight")});
      down.push_back({hf.find_tensor(x + "down_proj.weight")});
      for (auto p : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
        f.hidden.push_back(x + p);
    }
    stack(f, l + "gate_up_proj", gate_up, ff, h);
    stack(f, l + "down_proj", down, h, ff);
  }
  auto const fhp = qwen::qwen35_hparams_from_config(hf.hf()->config());
  qwen::qwen35_hf_view<edited_file> const view{f, false};
  moe_engine hff(qwen::bind_qwen35_weights(view, fhp, qwen::name_style::hf, binder), shape(11, 1),
                 {1});
  CHECK(slot_stream<moe_engine>{hff}.feed(o.prompts[0], true) == reference(hf));
}
