// Nemotron-H forward against transformers' fp32 logits on tiny random-weight hybrids
// (fixtures/nemotron/tiny_h: Mamba2, attention, relu² MLP; tiny_h_moe: Mamba2, attention, MoE;
// made by fixtures/scripts/make_nemotron_h_tiny.py), from safetensors, F32 GGUF and Q8_0 GGUF:
// every prompt position's logits, the greedy continuation, the MoE picks; then prefill chunking,
// batching and state slots, which must not change a bit.
#include <families/nemotron/nemotron_h.hpp>
#include <families/registry.hpp>
#include <tests/common/hf_oracle.hpp>
#include <tests/nemotron/nemotron_h_fixture.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/open.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace nemo = tf::families::nemotron;
using nemo::block_kind;
using tf::batch_row;
using tf::model::model_file;
using engine = tf::engine<nemo::nemotron_h, tf::backend::cpu>;
using stream = tf::test::stream<engine>;

namespace {

tf::backend::cpu binder;  // binds weights for the engines below (host memory: any CPU engine)

engine::weights load(model_file const& file) {
  return nemo::load_weights(file, binder);
}

engine make(engine::weights const& w, int pages, int slots, int threads = 2) {
  return engine(w, {pages, 16, tf::kv_dtype::f32, slots}, {threads});
}

// A prompt of `n` tokens, longer than several scan chunks of the fixtures (chunk_size 8).
std::vector<std::int32_t> long_prompt(int n, int salt) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 53 + salt * 131 + 7) % 1200);
  return p;
}

struct fixture_case {
  char const* dir;
  char const* arch;
  std::vector<block_kind> layers;
};

fixture_case const dense{"tiny_h",
                         "nemotron_h",
                         {block_kind::mamba, block_kind::attention, block_kind::mlp,
                          block_kind::mamba, block_kind::mlp}};
fixture_case const moe{
    "tiny_h_moe",
    "nemotron_h_moe",
    {block_kind::mamba, block_kind::attention, block_kind::moe, block_kind::mamba}};
// Nemotron 3 Super's shape: experts in a latent width between fc1 and fc2 projections.
fixture_case const latent{
    "tiny_h_latent",
    "nemotron_h_moe",
    {block_kind::mamba, block_kind::moe, block_kind::attention, block_kind::moe}};

// The MoE layer's picks for each token of a prompt (sorted where `sorted`) as recorded.
std::vector<std::vector<std::int32_t>> picks_of(tf::backend::cpu const& be, std::size_t tokens,
                                                bool sorted) {
  REQUIRE(be.routes().size() == 1);  // one MoE layer
  std::vector<std::vector<std::int32_t>> out;
  for (std::size_t t = 0; t < tokens; ++t) {
    out.push_back({be.routes()[0][2 * t], be.routes()[0][2 * t + 1]});
    if (sorted) std::ranges::sort(out.back());
  }
  return out;
}

// Every prompt position within `tol` of transformers and top-1 agreeing at 90% of them or more;
// where `exact`, every top-1, the greedy continuation and the MoE layer's picks (in order) as
// transformers'. Otherwise (Q8_0) the router may flip a near tie (at 10% of the tokens or fewer);
// a flip moves that token's logits by more than the quantization does, and the state carries it
// on, so the positions from the first flip on are held to the top-1 count only.
void check_against_oracle(fixture_case const& fc, std::string const& path, float tol, bool exact) {
  auto const& o = tf::test::hf_oracle_at(tf::test::nemotron_fixture(fc.dir));
  auto file = model_file::open(path);
  auto const w = load(file);
  CHECK(w.hp.vocab_size == o.vocab);
  CHECK(w.hp.layers == fc.layers);
  auto fwd = make(w, 8, 1);
  auto& be = fwd.backend();
  auto const V = static_cast<std::size_t>(o.vocab);
  bool const has_moe = fc.layers == moe.layers;
  tf::test::oracle_fit fit;
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    stream s(fwd);
    be.clear_routes();
    be.record_routes(true);
    auto const all = s.feed(o.prompts[p], true);
    be.record_routes(false);
    std::size_t const T = o.prompts[p].size();
    std::size_t clean = T, flips = 0;
    if (has_moe) {  // layer 2's picks, highest biased score first
      auto const& want = o.entries[p].at("experts").at("2");
      auto const got = picks_of(be, T, !exact);
      for (std::size_t t = 0; t < T; ++t) {
        auto w_t = want[t].get<std::vector<std::int32_t>>();
        if (!exact) std::ranges::sort(w_t);
        if (got[t] == w_t) continue;
        ++flips;
        clean = std::min(clean, t);
      }
    }
    std::span<float const> const got(all), ref(o.logits[p]);
    float const err = tf::test::max_abs_diff(got.first(clean * V), ref.first(clean * V));
    fit.worst = std::max(fit.worst, err);
    for (std::size_t t = 0; t < T; ++t, ++fit.total)
      fit.agree +=
          tf::test::argmax(got.subspan(t * V, V)) == tf::test::argmax(ref.subspan(t * V, V));
    INFO(path << " prompt " << p << ": max |tf - transformers| = " << err << " over the first "
              << clean << " of " << T << " positions (tolerance " << tol << "), " << flips
              << " MoE picks differ");
    CHECK(err <= tol);
    CHECK(flips <= (exact ? 0 : T / 10));
    if (exact) CHECK(s.greedy(all, o.greedy[p].size()) == o.greedy[p]);
  }
  INFO(path << ": " << fit);
  CHECK(fit.agree >= (exact ? fit.total : fit.total * 9 / 10));
  if (std::getenv("TF_NEMOTRON_REPORT")) std::printf("%s: %g\n", path.c_str(), fit.worst);
}

// A long prompt gives the same last logits, bit for bit, and the same greedy tokens fed whole, in
// chunks of 64, 7 or 1, in any slot.
void check_chunking(std::string const& path) {
  auto file = model_file::open(path);
  auto fwd = make(load(file), 40, 3);
  auto const p = long_prompt(150, 1);
  stream whole(fwd, tf::test::pages_in_order(12), 0);
  auto const ref = whole.feed(p, false);
  auto const ref_tokens = whole.greedy(ref, 8);
  int slot = 1;
  for (std::size_t chunk : {64, 7, 1}) {
    INFO(path << ": chunks of " << chunk);
    std::vector<std::int32_t> pages;
    for (int i = 0; i < 12; ++i) pages.push_back(39 - i);  // other pages, in reverse
    stream s(fwd, pages, slot);
    slot = slot == 1 ? 2 : 1;
    auto const last = s.feed_chunks(p, chunk);
    CHECK(last == ref);
    CHECK(s.greedy(last, 8) == ref_tokens);
  }
}

// The long prompt alone, then in batches with other streams (other slots and pages): whole beside
// a short prompt and a half-fed copy, the copy's rest beside a decode step, then both copies
// decoding side by side; each row's logits are the solo ones, bit for bit.
void check_batching(std::string const& path, int threads) {
  auto file = model_file::open(path);
  auto const w = load(file);
  auto const p = long_prompt(150, 2), q = long_prompt(30, 3);
  std::vector<float> solo;
  std::vector<std::int32_t> solo_tokens;
  {
    auto f1 = make(w, 12, 1, 1);
    stream s(f1);
    solo = s.feed(p, false);
    solo_tokens = s.greedy(solo, 6);
  }
  auto fwd = make(w, 48, 4, threads);
  std::vector<std::vector<std::int32_t>> tables(4);
  for (int i = 0; i < 12; ++i)
    for (int t = 0; t < 4; ++t) tables[static_cast<std::size_t>(t)].push_back(i * 4 + t);
  stream a(fwd, tables[3], 3), b(fwd, tables[0], 1), c(fwd, tables[1], 2);
  auto const V = static_cast<std::size_t>(fwd.vocab_size());
  auto run = [&](std::vector<batch_row> const& rows) {
    std::vector<float> out(static_cast<std::size_t>(tf::logits_rows(rows)) * V);
    fwd.forward(rows, out.data());
    return out;
  };
  auto out = run({a.row(p, false), b.row(q, false), c.row(std::span(p).first(70), false)});
  INFO(path << ", " << threads << " threads");
  CHECK(std::equal(solo.begin(), solo.end(), out.begin()));
  std::int32_t const bt = tf::test::argmax(std::span<float const>(out).subspan(V, V));
  out = run({b.row({&bt, 1}, false), c.row(std::span(p).subspan(70), false)});
  CHECK(std::equal(solo.begin(), solo.end(), out.begin() + static_cast<std::ptrdiff_t>(V)));
  std::vector<float> la(solo), lc(solo);
  for (std::size_t i = 0; i < solo_tokens.size(); ++i) {
    std::int32_t const ta = tf::test::argmax(la), tc = tf::test::argmax(lc);
    CHECK(ta == solo_tokens[i]);
    CHECK(tc == solo_tokens[i]);
    out = run({c.row({&tc, 1}, false), a.row({&ta, 1}, false)});
    lc.assign(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(V));
    la.assign(out.begin() + static_cast<std::ptrdiff_t>(V), out.end());
    CHECK(la == lc);
  }
}

}  // namespace

TEST_CASE("tiny Nemotron-H (dense), HF safetensors and F32 GGUF: within 2e-5, greedy exact") {
  auto const dir = tf::test::nemotron_fixture(dense.dir);
  check_against_oracle(dense, dir, 2e-5f, true);
  check_against_oracle(dense, dir + "/tiny-f32.gguf", 2e-5f, true);
}

TEST_CASE("tiny Nemotron-H MoE, HF safetensors and F32 GGUF: within 2e-5, picks and greedy exact") {
  auto const dir = tf::test::nemotron_fixture(moe.dir);
  check_against_oracle(moe, dir, 2e-5f, true);
  check_against_oracle(moe, dir + "/tiny-f32.gguf", 2e-5f, true);
}

TEST_CASE("tiny Nemotron-H (dense and MoE), Q8_0 GGUF: within 0.25 until a flipped MoE pick") {
  check_against_oracle(dense, tf::test::nemotron_fixture(dense.dir) + "/tiny-q8_0.gguf", 0.25f,
                       false);
  check_against_oracle(moe, tf::test::nemotron_fixture(moe.dir) + "/tiny-q8_0.gguf", 0.25f, false);
}

TEST_CASE("tiny Nemotron-H MoE with latent projections: within 2e-5 and greedy exact; Q8_0 top-1") {
  auto const dir = tf::test::nemotron_fixture(latent.dir);
  check_against_oracle(latent, dir, 2e-5f, true);
  check_against_oracle(latent, dir + "/tiny-f32.gguf", 2e-5f, true);
  auto file = model_file::open(dir + "/tiny-f32.gguf");
  CHECK(load(file).hp.moe_latent_size == 32);
  // Q8_0: held to top-1 agreement (no per-layer pick tracking here; a flipped pick moves logits).
  check_against_oracle(latent, dir + "/tiny-q8_0.gguf", 1e9f, false);
}

TEST_CASE("a Nemotron-H prompt fed whole or in chunks of 64, 7 or 1 gives the same bits") {
  check_chunking(tf::test::nemotron_fixture(dense.dir) + "/tiny-q8_0.gguf");
  check_chunking(tf::test::nemotron_fixture(moe.dir));
  check_chunking(tf::test::nemotron_fixture(latent.dir) + "/tiny-f32.gguf");
}

TEST_CASE("a Nemotron-H row gives the same bits alone or batched, whatever its slot and pages") {
  for (int threads : {1, 2}) {
    check_batching(tf::test::nemotron_fixture(dense.dir) + "/tiny-f32.gguf", threads);
    check_batching(tf::test::nemotron_fixture(moe.dir) + "/tiny-q8_0.gguf", threads);
  }
}

TEST_CASE("tf::open runs each Nemotron-H file as nemotron_h, greedy as transformers") {
  for (auto const* fc : {&dense, &moe}) {
    auto const dir = tf::test::nemotron_fixture(fc->dir);
    auto const& o = tf::test::hf_oracle_at(dir);
    CHECK(tf::families::dispatch(fc->arch, [](auto t) {
            return std::string(decltype(t)::type::name);
          }) == "nemotron_h");
    for (auto const& path : {dir, dir + "/tiny-f32.gguf"}) {
      INFO(path);
      auto m = tf::open(path, {.threads = 2});
      CHECK(m->family() == "nemotron_h");
      CHECK(m->kv().num_state_slots == 1);
      CHECK((m->codec() != nullptr) == path.ends_with(".gguf"));  // the GGUF carries a vocabulary
      auto const out = m->generate(o.prompts[1], {}, 16, {}, false);
      CHECK(out.tokens == o.greedy[1]);
    }
  }
  // Sizes the memory budget reads before binding: f32 KV of the one attention layer (2 KV heads
  // of 16), and per stream two Mamba2 layers of (K-1) * conv_dim + d_inner * state_size floats.
  auto file = model_file::open(tf::test::nemotron_fixture(dense.dir) + "/tiny-q8_0.gguf");
  CHECK(engine::kv_bytes_per_token(file, tf::kv_dtype::f32) == 1 * 2 * 16 * 2 * 4);
  CHECK(engine::state_bytes_per_stream(file) == 2 * (3 * 192 + 128 * 16) * 4);
  CHECK(engine::context_length(file) == 1 << 20);
}

TEST_CASE("a Nemotron-H file missing a tensor or with a wrong shape names it in the tf::error") {
  auto file = model_file::open(tf::test::nemotron_fixture(moe.dir) + "/tiny-f32.gguf");
  auto const* g = file.gguf();
  REQUIRE(g);
  auto const hp = nemo::hparams_from_gguf(*g);
  struct missing {
    decltype(g) inner;
    std::string drop;
    auto const* find_tensor(std::string_view n) const {
      return n == drop ? nullptr : inner->find_tensor(n);
    }
  };
  auto msg_of = [&](std::string const& drop, nemo::nemotron_h_hparams const& h) {
    try {
      nemo::bind_weights(missing{g, drop}, h, nemo::name_style::gguf, binder);
    } catch (tf::error const& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (char const* t :
       {"blk.0.ssm_in.weight", "blk.3.ssm_a", "blk.0.ssm_conv1d.weight", "blk.1.attn_k.weight",
        "blk.2.ffn_up_exps.weight", "blk.2.exp_probs_b.bias", "blk.2.ffn_down_shexp.weight"})
    CHECK_THAT(msg_of(t, hp), Catch::Contains(t));
  CHECK(msg_of("blk.0.ssm_conv1d.bias", hp).empty());  // the conv bias is optional
  auto wrong = hp;
  wrong.ssm_state_size = 8;
  CHECK_THAT(msg_of("", wrong), Catch::Contains("blk.0.ssm_in.weight"));
  wrong = hp;
  wrong.moe_intermediate_size = 48;
  CHECK_THAT(msg_of("", wrong), Catch::Contains("blk.2.ffn_up_exps.weight"));
  wrong = hp;
  wrong.num_experts_per_tok = 5;
  CHECK_THAT(msg_of("", wrong), Catch::Contains("experts"));
  wrong = hp;
  wrong.layers[3] = block_kind::attention;  // a Mamba2 layer bound as attention
  CHECK_THAT(msg_of("", wrong), Catch::Contains("blk.3.attn_q.weight"));
}

TEST_CASE("Nemotron-H HF names under model. and transformers 5's stacked experts bind alike") {
  auto const dir = tf::test::nemotron_fixture(moe.dir);
  auto hf = model_file::open(dir);
  auto gg = model_file::open(dir + "/tiny-f32.gguf");
  // The checkpoint as transformers 5 holds it: model.* names, experts stacked (GGUF's F32
  // ffn_*_exps have the same layout), no per-expert tensors.
  struct v5_file {
    tf::model::hf_model const* hf;
    tf::model::gguf_file const* g;
    tf::model::tensor_view const* find_tensor(std::string_view n) const {
      if (n == "model.layers.2.mixer.experts.up_proj")
        return g->find_tensor("blk.2.ffn_up_exps.weight");
      if (n == "model.layers.2.mixer.experts.down_proj")
        return g->find_tensor("blk.2.ffn_down_exps.weight");
      if (n.starts_with("backbone.") || n.find(".experts.") != std::string_view::npos)
        return nullptr;
      if (n.starts_with("model.")) return hf->find_tensor("backbone." + std::string(n.substr(6)));
      return hf->find_tensor(n);
    }
  };
  v5_file const v5{hf.hf(), gg.gguf()};
  nemo::hf_prefixed<v5_file> const named{v5, "model."};
  auto const w5 = nemo::bind_weights(named, nemo::read_hparams(hf), nemo::name_style::hf, binder);
  auto const& o = tf::test::hf_oracle_at(dir);
  auto f5 = make(w5, 8, 1), f = make(load(hf), 8, 1);
  CHECK(stream(f5).feed(o.prompts[1], true) == stream(f).feed(o.prompts[1], true));
  // Without the fused tensors, the per-expert names are looked for (and named when missing).
  struct no_experts {
    tf::model::hf_model const* hf;
    tf::model::tensor_view const* find_tensor(std::string_view n) const {
      return n.find(".experts.3.up_proj") != std::string_view::npos ? nullptr : hf->find_tensor(n);
    }
  };
  CHECK_THROWS_WITH(
      nemo::bind_weights(no_experts{hf.hf()}, nemo::read_hparams(hf), nemo::name_style::hf, binder),
      Catch::Contains("backbone.layers.2.mixer.experts.3.up_proj.weight"));
}
