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
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/open.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
using tf::batch_row;
using tf::model::model_file;
using tf::test::max_abs_diff;
using next_engine = tf::engine<qwen::qwen3_next, tf::backend::cpu>;

namespace {

std::string const dir = std::string(TF_FIXTURES_DIR) + "/qwen/tiny3next";
std::string const f32_gguf = dir + "/tiny-f32.gguf";
std::string const q8_gguf = dir + "/tiny-q8_0.gguf";

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

qwen::qwen35_weights<tf::backend::cpu> load(model_file const& file) {
  return qwen::load_qwen3_next_weights(file, binder);
}

/// KV pages of 16 positions and `slots` state slots.
tf::kv_shape shape(int pages, int slots) {
  return {pages, 16, tf::kv_dtype::f32, slots};
}

/// Page ids first, first + stride, ... (11 pages: 176 positions).
std::vector<std::int32_t> pages_from(int first, int stride) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < 11; ++i) p.push_back(first + i * stride);
  return p;
}

/// One stream: its page table and its state slot.
struct slot_stream {
  next_engine& fwd;
  std::vector<std::int32_t> pages = pages_from(0, 1);
  std::int32_t slot = 0;
  std::int32_t pos = 0;

  std::vector<float> feed(std::span<std::int32_t const> toks, bool all) {
    batch_row row{toks, pos, pages, all, slot};
    std::vector<float> out(static_cast<std::size_t>(tf::logits_rows({&row, 1}) * fwd.vocab_size()));
    fwd.forward({&row, 1}, out.data());
    pos += static_cast<std::int32_t>(toks.size());
    return out;
  }
  /// The last logits after feeding `prompt` in chunks of `chunk` from position 0.
  std::vector<float> prefill(std::vector<std::int32_t> const& prompt, std::size_t chunk) {
    pos = 0;
    std::vector<float> last;
    for (std::size_t at = 0; at < prompt.size(); at += chunk)
      last = feed(std::span(prompt).subspan(at, std::min(chunk, prompt.size() - at)), false);
    return last;
  }
  std::vector<std::int32_t> greedy(std::span<float const> logits, std::size_t n) {
    auto const vocab = static_cast<int>(fwd.vocab_size());
    return tf::test::greedy_tokens(tf::test::last_row(logits, vocab), n, [this](std::int32_t t) {
      return feed({&t, 1}, false);
    });
  }
};

/// Every prompt position's logits within `tol` of transformers' and top-1 agreeing at >= 90% of
/// them; with `exact`, the 16 greedy tokens after the prompt (decoded one at a time) are
/// transformers' too.
void check_oracle(qwen::qwen35_weights<tf::backend::cpu> const& w, std::string const& what,
                  float tol, bool exact) {
  auto const& o = tf::test::hf_oracle_at(dir);
  next_engine fwd(w, shape(11, 1), {2});
  auto const fit = tf::test::fit_to(o, [&](std::size_t p) {
    slot_stream s{fwd};
    auto all = s.feed(o.prompts[p], true);
    auto const got = s.greedy(all, o.greedy[p].size());
    INFO(what << " prompt " << p << " (" << o.prompts[p].size() << " tokens)");
    CHECK(got.size() == 16);
    if (exact) CHECK(got == o.greedy[p]);
    return all;
  });
  INFO(what << ": " << fit << " (tolerance " << tol << ")");
  CHECK(fit.worst <= tol);
  CHECK(fit.agree >= fit.total * 9 / 10);
}

void check_oracle(std::string const& path, float tol, bool exact) {
  auto file = model_file::open(path);
  auto const w = load(file);
  auto const& o = tf::test::hf_oracle_at(dir);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK_FALSE(w.hp.tiled_v_heads);
  CHECK(w.hp.mlp_only_layers == std::vector{1});
  REQUIRE(w.layers.size() == 4);
  check_oracle(w, path, tol, exact);
}

/// Prompt 1 (150 tokens) fed in chunks of 1, 7, 64 and whole: the same last logits to the bit
/// and the same 16 greedy tokens.
void check_chunking(std::string const& path) {
  auto const& prompt = tf::test::hf_oracle_at(dir).prompts[1];
  REQUIRE(prompt.size() >= 150);
  auto file = model_file::open(path);
  next_engine fwd(load(file), shape(11, 1), {2});
  slot_stream s{fwd};
  auto const whole = s.prefill(prompt, prompt.size());
  auto const tokens = s.greedy(whole, 16);
  for (std::size_t chunk : {1, 7, 64}) {
    INFO(path << " chunks of " << chunk);
    auto const last = s.prefill(prompt, chunk);
    CHECK(last == whole);
    CHECK(s.greedy(last, 16) == tokens);
  }
}

/// Streams in one batch, each in its own state slot and pages, give the bits each gives alone
/// (slot 0, one thread): prompt 1 whole beside prompts 0 and 1 cut in two, then decoding together.
void check_batch(std::string const& path) {
  auto const& o = tf::test::hf_oracle_at(dir);
  auto const& p0 = o.prompts[0];
  auto const& p1 = o.prompts[1];
  auto const V = static_cast<std::size_t>(o.vocab);
  auto file = model_file::open(path);
  auto const w = load(file);
  std::vector<std::vector<float>> solo_last;
  std::vector<std::vector<std::int32_t>> solo_tokens;
  {
    next_engine f1(w, shape(11, 1), {1});
    slot_stream s{f1};
    for (auto const* p : {&p0, &p1}) {
      solo_last.push_back(s.prefill(*p, p->size()));
      solo_tokens.push_back(s.greedy(solo_last.back(), 4));
    }
  }
  auto const row_of = [&](std::vector<float> const& out, std::size_t r) {
    return std::vector<float>(out.begin() + static_cast<std::ptrdiff_t>(r * V),
                              out.begin() + static_cast<std::ptrdiff_t>((r + 1) * V));
  };
  for (int threads : {1, 2}) {
    INFO(path << " threads " << threads);
    next_engine fwd(w, shape(33, 4), {threads});
    auto const ta = pages_from(2, 3), tb = pages_from(0, 3), tc = pages_from(1, 3);
    std::size_t const cut0 = 5, cut1 = 7;
    std::vector<batch_row> first{{p1, 0, ta, false, 3},
                                 {std::span(p0).first(cut0), 0, tb, false, 0},
                                 {std::span(p1).first(cut1), 0, tc, false, 1}};
    std::vector<float> out(3 * V);
    fwd.forward(first, out.data());
    CHECK(row_of(out, 0) == solo_last[1]);
    std::vector<batch_row> second{
        {std::span(p0).subspan(cut0), static_cast<std::int32_t>(cut0), tb, false, 0},
        {std::span(p1).subspan(cut1), static_cast<std::int32_t>(cut1), tc, false, 1}};
    fwd.forward(second, out.data());
    CHECK(row_of(out, 0) == solo_last[0]);
    CHECK(row_of(out, 1) == solo_last[1]);
    // Decode the three streams together, greedy on each one's own logits.
    std::vector<std::int32_t> next{solo_tokens[1][0], solo_tokens[0][0], solo_tokens[1][0]};
    std::vector<std::vector<std::int32_t>> got(3);
    for (int step = 0; step < 3; ++step) {
      auto const at0 = static_cast<std::int32_t>(p0.size()) + step;
      auto const at1 = static_cast<std::int32_t>(p1.size()) + step;
      std::vector<batch_row> rows{{std::span(next).subspan(0, 1), at1, ta, false, 3},
                                  {std::span(next).subspan(1, 1), at0, tb, false, 0},
                                  {std::span(next).subspan(2, 1), at1, tc, false, 1}};
      fwd.forward(rows, out.data());
      for (std::size_t r = 0; r < 3; ++r) {
        next[r] = tf::test::argmax(std::span<float const>(out).subspan(r * V, V));
        got[r].push_back(next[r]);
      }
    }
    auto const tail = [](std::vector<std::int32_t> const& t) {
      return std::vector<std::int32_t>(t.begin() + 1, t.end());
    };
    CHECK(got[0] == tail(solo_tokens[1]));
    CHECK(got[1] == tail(solo_tokens[0]));
    CHECK(got[2] == tail(solo_tokens[1]));
  }
}

/// A file seen without some tensors and with others added (tensors built in `bytes`).
struct edited {
  model_file const& inner;
  std::vector<std::string> hidden;
  std::map<std::string, tf::model::tensor_view, std::less<>> extra;
  std::vector<std::vector<std::byte>> bytes;

  tf::model::tensor_view const* find_tensor(std::string_view n) const {
    if (std::find(hidden.begin(), hidden.end(), n) != hidden.end()) return nullptr;
    auto it = extra.find(n);
    return it != extra.end() ? &it->second : inner.find_tensor(n);
  }
};

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
  edited legacy{file, {}, {}, {}};
  legacy.bytes.reserve(4);
  for (int i : {0, 1, 2}) {
    auto const l = "blk." + std::to_string(i) + ".";
    auto const* qkv = file.find_tensor(l + "attn_qkv.weight");
    auto const* z = file.find_tensor(l + "attn_gate.weight");
    REQUIRE(qkv->type == tf::model::tensor_type::f32);
    REQUIRE(z->type == tf::model::tensor_type::f32);
    auto& b = legacy.bytes.emplace_back();
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
    auto& v = legacy.extra[l + "ssm_in.weight"];
    v.name = l + "ssm_in.weight";
    v.type = tf::model::tensor_type::f32;
    v.dims = {h, nk * (2 * dk + 2 * rv)};
    v.data = b.data();
    v.bytes = b.size();
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
  check_chunking(dir);
  check_chunking(f32_gguf);
  check_chunking(q8_gguf);
}

TEST_CASE("a Qwen3-Next stream in a batch beside other state slots gives its bits alone") {
  check_batch(dir);
  check_batch(q8_gguf);
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
    CHECK_THAT(bind_error(edited{gguf, {name}, {}, {}}, ghp, qwen::name_style::gguf),
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
    CHECK_THAT(bind_error(edited{hf, {name}, {}, {}}, hhp, qwen::name_style::hf),
               Catch::Contains(name));
  }
  auto wrong = ghp;
  wrong.linear_value_head_dim = 32;  // the conv and the projections no longer fit
  CHECK_THAT(bind_error(edited{gguf, {}, {}, {}}, wrong, qwen::name_style::gguf),
             Catch::Contains("blk.0.attn_qkv.weight"));
  wrong = hhp;
  wrong.linear_num_value_heads = 2;  // in_proj_qkvz and in_proj_ba no longer fit
  CHECK_THAT(bind_error(edited{hf, {}, {}, {}}, wrong, qwen::name_style::hf),
             Catch::Contains("model.layers.0.linear_attn.in_proj_qkvz.weight"));
  wrong = ghp;
  wrong.mlp_only_layers.clear();  // layer 1 has no experts
  CHECK_THAT(bind_error(edited{gguf, {}, {}, {}}, wrong, qwen::name_style::gguf),
             Catch::Contains("blk.1.ffn_gate_inp.weight"));
}
