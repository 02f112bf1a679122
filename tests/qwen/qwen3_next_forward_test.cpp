// Qwen3-Next (qwen3next) forward against transformers' fp32 logits on a tiny random-weight hybrid
// (fixtures/qwen/tiny3next, made by fixtures/scripts/make_qwen3_next_tiny.py: layers GDN, GDN
// with a dense MLP, GDN, attention; the others routed; prompts of 21 and 150 tokens, the second
// over three of HF's 64-token GDN chunks), from safetensors (interleaved in_proj_qkvz /
// in_proj_ba), F32 GGUF (attn_qkv, attn_gate flat, ssm_ba interleaved), a legacy GGUF (ssm_in) and
// Q8_0 GGUF; then the recurrent state's invariants: a prompt fed in chunks of 1, 7, 64 or whole,
// alone or in a batch beside other streams' slots, gives the same bits.
#include <families/qwen/qwen3_next.hpp>
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
using tf::model::model_file;
using tf::test::edited_file;
using next_engine = tf::engine<qwen::qwen3_next, tf::backend::cpu>;
using slot_stream = hybrid::slot_stream<next_engine>;

namespace {

std::string const dir = std::string(TF_FIXTURES_DIR) + "/qwen/tiny3next";
std::string const f32_gguf = dir + "/tiny-f32.gguf";
std::string const q8_gguf = dir + "/tiny-q8_0.gguf";

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

qwen::qwen35_weights<tf::backend::cpu> load(model_file const& file) {
  return qwen::load_qwen3_next_weights(file, binder);
}

/// The weights of `path` against transformers: hybrid::check_oracle.
void check_oracle(std::string const& path, float tol, bool exact) {
  auto const& o = tf::test::hf_oracle_at(dir);
  auto file = model_file::open(path);
  auto const w = load(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK_FALSE(w.hp.tiled_v_heads);
  CHECK(w.hp.mlp_only_layers == std::vector{1});
  REQUIRE(w.layers.size() == 4);
  hybrid::check_oracle<next_engine>(w, o, path, tol, exact);
}

/// message of the tf::error binding `f` throws, or empty.
template <class File>
std::string bind_error(File const& f, qwen::qwen35_hparams const& hp, qwen::name_style style) {
  try {
    qwen::bind_qwen3_next_weights(f, hp, style, binder);
  } catch (tf::error const& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("tiny Qwen3-Next, HF safetensors (interleaved projections): within 1e-4, greedy exact") {
  check_oracle(dir, 1e-4f, true);
}

TEST_CASE("tiny Qwen3-Next, F32 GGUF (flat attn_qkv, ssm_ba interleaved): within 1e-4, greedy") {
  check_oracle(f32_gguf, 1e-4f, true);
}

// Q8_0 weights (the fixture's weights lie on the Q8_0 grid, so they are exact) and Q8_0
// activations, which transformers' fp32 forward does not round: a token whose second and third
// router logits lie closer than that rounding picks another expert, and its logits move further
// than the others'.
TEST_CASE("tiny Qwen3-Next, Q8_0 GGUF: logits within 0.5 of transformers, top-1 at >= 90%") {
  check_oracle(q8_gguf, 0.5f, false);
}

TEST_CASE("a legacy Qwen3-Next GGUF (one interleaved ssm_in) loads as the flat one") {
  // The F32 GGUF's attn_qkv and attn_gate rows, interleaved per k-head group back into ssm_in
  // {hidden, 2 nk dk + 2 nv dv}: [q_g, k_g, v_g, z_g] for each group g.
  auto file = model_file::open(f32_gguf);
  auto const hp = qwen::qwen3_next_hparams_from_gguf(*file.gguf());
  std::int64_t const h = 64, nk = 2, dk = 16, rv = 2 * 16;
  edited_file legacy{file, {}, {}, {}};
  for (int i : {0, 1, 2}) {
    auto const l = "blk." + std::to_string(i) + ".";
    auto const* qkv = file.find_tensor(l + "attn_qkv.weight");
    auto const* z = file.find_tensor(l + "attn_gate.weight");
    REQUIRE(qkv->type == tf::model::tensor_type::f32);
    REQUIRE(z->type == tf::model::tensor_type::f32);
    std::vector<std::byte> b;
    auto rows = [&](tf::model::tensor_view const* t, std::int64_t first, std::int64_t n) {
      auto const* from = t->data + first * h * 4;
      b.insert(b.end(), from, from + n * h * 4);
    };
    for (std::int64_t g = 0; g < nk; ++g) {
      rows(qkv, g * dk, dk);
      rows(qkv, nk * dk + g * dk, dk);
      rows(qkv, 2 * nk * dk + g * rv, rv);
      rows(z, g * rv, rv);
    }
    legacy.add_f32(l + "ssm_in.weight", {h, nk * (2 * dk + 2 * rv)}, std::move(b));
    legacy.hidden.insert(legacy.hidden.end(), {l + "attn_qkv.weight", l + "attn_gate.weight"});
  }
  auto const& o = tf::test::hf_oracle_at(dir);
  next_engine flat(load(file), shape(11, 1), {1});
  next_engine interleaved(qwen::bind_qwen3_next_weights(legacy, hp, qwen::name_style::gguf, binder),
                          shape(11, 1), {1});
  CHECK(slot_stream{interleaved}.feed(o.prompts[0], true) ==
        slot_stream{flat}.feed(o.prompts[0], true));
}

TEST_CASE("a Qwen3-Next prompt fed in chunks of 1, 7, 64 or whole gives the same bits") {
  auto const& prompt = tf::test::hf_oracle_at(dir).prompts[1];
  for (auto const& path : {dir, f32_gguf, q8_gguf})
    hybrid::check_chunking<next_engine>(path, load, prompt);
}

TEST_CASE("a Qwen3-Next stream in a batch beside other state slots gives its bits alone") {
  for (auto const& path : {dir, q8_gguf})
    hybrid::check_batch<next_engine>(path, load, tf::test::hf_oracle_at(dir));
}

TEST_CASE("the tiny Qwen3-Next routes each token to transformers' experts") {
  auto const& o = tf::test::hf_oracle_at(dir);
  std::vector<int> const routed{0, 2, 3};  // layer 1 is dense
  for (auto const& path : {dir, f32_gguf}) {
    auto file = model_file::open(path);
    next_engine fwd(load(file), shape(11, 1), {1});
    fwd.backend().record_routes(true);
    for (std::size_t p = 0; p < o.prompts.size(); ++p) {
      fwd.backend().clear_routes();
      slot_stream{fwd}.feed(o.prompts[p], false);
      auto const& routes = fwd.backend().routes();
      REQUIRE(routes.size() == routed.size());
      REQUIRE(o.entries[p].at("experts").size() == routed.size());
      std::set<std::vector<int>> sets;
      for (std::size_t m = 0; m < routed.size(); ++m) {
        std::vector<std::int32_t> want;
        for (auto const& t : o.entries[p].at("experts").at(std::to_string(routed[m])))
          for (auto e : t) want.push_back(e.get<std::int32_t>());
        INFO(path << " prompt " << p << " layer " << routed[m]);
        CHECK(routes[m] == want);
        for (std::size_t t = 0; t + 1 < want.size(); t += 2)
          sets.insert({std::min(want[t], want[t + 1]), std::max(want[t], want[t + 1])});
      }
      CHECK(sets.size() > 1);
    }
  }
}

TEST_CASE(
    "tf::open runs the Qwen3-Next files through the registry: greedy tokens as transformers") {
  auto const& o = tf::test::hf_oracle_at(dir);
  for (auto const& path : {f32_gguf, dir}) {
    INFO(path);
    tf::open_options opt;
    opt.kv = tf::kv_dtype::f32;
    auto m = tf::open(path, opt);
    CHECK(m->family() == "qwen3_next");
    CHECK(m->kv().num_state_slots == 1);
    CHECK((m->codec() != nullptr) == (path != dir));  // the GGUFs carry the qwen2 tokenizer
    auto const out = m->generate(std::span<std::int32_t const>(o.prompts[1]), {}, 16, {}, false);
    CHECK(out.tokens == o.greedy[1]);
  }
}

TEST_CASE("the registry answers the Qwen3-Next architecture names; KV and state sizes") {
  auto family_of = [](std::string_view arch) {
    return tf::families::dispatch(arch,
                                  [](auto t) { return std::string(decltype(t)::type::name); });
  };
  CHECK(family_of("qwen3next") == "qwen3_next");
  CHECK(family_of("qwen3_next") == "qwen3_next");
  STATIC_REQUIRE(tf::has_forward<qwen::qwen3_next, tf::backend::cpu>);
  STATIC_REQUIRE(next_engine::has_state);
  for (auto const& path : {f32_gguf, dir}) {
    INFO(path);
    auto file = model_file::open(path);
    // one attention layer x 2 KV heads x 32 x (K and V) x 4 bytes
    CHECK(next_engine::kv_bytes_per_token(file, tf::kv_dtype::f32) == 1 * 2 * 32 * 2 * 4);
    // three GDN layers x (conv window 3 x 128 + delta state 4 x 16 x 16) x 4 bytes
    CHECK(next_engine::state_bytes_per_stream(file) == 3 * (3 * 128 + 4 * 16 * 16) * 4);
  }
}

TEST_CASE("a Qwen3-Next file missing or misshaping a tensor names it in the tf::error") {
  auto gguf = model_file::open(f32_gguf);
  auto const ghp = qwen::qwen3_next_hparams_from_gguf(*gguf.gguf());
  for (std::string name :
       {"blk.0.ssm_ba.weight", "blk.2.attn_gate.weight", "blk.1.ssm_a", "blk.3.attn_q.weight",
        "blk.1.ssm_conv1d.weight", "blk.1.ffn_down.weight", "blk.0.ffn_gate_inp_shexp.weight",
        "blk.3.ffn_up_exps.weight", "blk.2.ssm_norm.weight", "output.weight",
        "blk.0.attn_qkv.weight"}) {
    INFO(name);
    CHECK_THAT(bind_error(edited_file{gguf, {name}, {}, {}}, ghp, qwen::name_style::gguf),
               Catch::Contains(name) && Catch::Contains("qwen3_next"));
  }
  auto hf = model_file::open(dir);
  auto const hhp = qwen::qwen3_next_hparams_from_config(hf.hf()->config());
  for (std::string name :
       {"model.layers.0.linear_attn.in_proj_qkvz.weight",
        "model.layers.2.linear_attn.in_proj_ba.weight", "model.layers.1.mlp.gate_proj.weight",
        "model.layers.3.mlp.experts.1.up_proj.weight",
        "model.layers.0.mlp.shared_expert_gate.weight"}) {
    INFO(name);
    CHECK_THAT(bind_error(edited_file{hf, {name}, {}, {}}, hhp, qwen::name_style::hf),
               Catch::Contains(name));
  }
  auto wrong = ghp;
  wrong.linear_value_head_dim = 32;  // the conv and the projections no longer fit
  CHECK_THAT(bind_error(edited_file{gguf, {}, {}, {}}, wrong, qwen::name_style::gguf),
             Catch::Contains("blk.0.attn_qkv.weight"));
  wrong = hhp;
  wrong.linear_num_value_heads = 2;  // in_proj_qkvz and in_proj_ba no longer fit
  CHECK_THAT(bind_error(edited_file{hf, {}, {}, {}}, wrong, qwen::name_style::hf),
             Catch::Contains("model.layers.0.linear_attn.in_proj_qkvz.weight"));
  wrong = ghp;
  wrong.mlp_only_layers.clear();  // layer 1 has no experts
  CHECK_THAT(bind_error(edited_file{gguf, {}, {}, {}}, wrong, qwen::name_style::gguf),
             Catch::Contains("blk.1.ffn_gate_inp.weight"));
}
