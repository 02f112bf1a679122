// MTP heads as draft sources (include/tf/serve/mtp_draft.hpp): Qwen3.5's and Qwen3-Next's mtp.*
// heads (families/qwen/qwen35_mtp.hpp; fixtures/qwen/tiny35_mtp, tiny3next_mtp) and GLM-4.5's
// next-n layer (families/glm/glm4_moe_mtp.hpp; fixtures/glm/tiny45_mtp), from safetensors and
// F32 GGUF, against the float64 numpy forward of their fixture scripts
// (fixtures/scripts/make_qwen35_mtp_tiny.py, make_glm45_mtp_tiny.py) and llama.cpp's MTP context
// (make_mtp_llama.py): logits and hidden states for 12 positions and the head's greedy chain; the
// engine's forward with hidden states (tf::engine::forward(rows, logits, hidden)); and MTP drafts
// in the lane host: replies equal to the replies without drafts, greedy and seeded, solo and 4 at
// once, with drafts accepted.
#include <families/glm/glm4_moe.hpp>
#include <families/mtp_heads.hpp>
#include <families/qwen/qwen35.hpp>
#include <families/qwen/qwen3_next.hpp>
#include <tests/common/served_replies.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/serve/lane_host.hpp>
#include <tf/serve/mtp_draft.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
namespace glm = tf::families::glm;
using tf::model::model_file;
using namespace std::chrono_literals;
using dense_engine = tf::engine<qwen::qwen35, tf::backend::cpu>;
using glm_engine = tf::engine<glm::glm4_moe, tf::backend::cpu>;
using next_engine = tf::engine<qwen::qwen3_next, tf::backend::cpu>;

namespace {

std::string const dir = std::string(TF_FIXTURES_DIR) + "/qwen/tiny35_mtp";
std::string const glm_dir = std::string(TF_FIXTURES_DIR) + "/glm/tiny45_mtp";
std::string const next_dir = std::string(TF_FIXTURES_DIR) + "/qwen/tiny3next_mtp";

struct oracle {
  std::int64_t T = 0, K = 0, H = 0, V = 0;
  std::vector<std::int32_t> tokens, chain;
  std::vector<float> hidden_in, logits, hidden_out, chain_logits;
};

oracle load_oracle(std::string const& dir) {
  {
    oracle o;
    auto const j = nlohmann::json::parse(std::ifstream(dir + "/mtp_oracle.json"));
    o.T = j.at("T");
    o.K = j.at("K");
    o.H = j.at("hidden");
    o.V = j.at("vocab");
    o.tokens = j.at("tokens").get<std::vector<std::int32_t>>();
    o.chain = j.at("chain").get<std::vector<std::int32_t>>();
    std::ifstream bin(dir + "/mtp_oracle.bin", std::ios::binary);
    auto read = [&](std::vector<float>& v, std::int64_t n) {
      v.resize(static_cast<std::size_t>(n));
      bin.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
    };
    read(o.hidden_in, o.T * o.H);
    read(o.logits, o.T * o.V);
    read(o.hidden_out, o.T * o.H);
    read(o.chain_logits, o.K * o.V);
    REQUIRE(bin.good());
    return o;
  }
}

float max_abs_diff(std::span<float const> a, std::span<float const> b) {
  REQUIRE(a.size() == b.size());
  float d = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

std::int32_t argmax(std::span<float const> row) {
  return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The head of the model in `dir` against its oracle: one row of 12 positions, the greedy chain
// from its last, and the same positions in two calls.
// `path` is the fixture folder in `dir` or its GGUF; with `llama`, llama.cpp's logits
// (llama_mtp_logits.bin, fixtures/scripts/make_mtp_llama.py) are the second oracle.
void check_head(std::string const& dir, std::string const& path, bool llama = true) {
  INFO(path);
  auto const o = load_oracle(dir);
  auto file = model_file::open(path);
  auto head = tf::families::open_mtp_head(file);
  REQUIRE(head);
  CHECK(head->hidden_size() == o.H);
  CHECK(head->vocab_size() == o.V);
  // Its store, counted by serve before it fills: K and V (f32) of its one layer at every position
  // of every stream, from the model's config.
  auto cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  if (cfg.contains("text_config")) cfg = cfg.at("text_config");
  auto const per_token = 2u * cfg.at("num_key_value_heads").get<std::uint64_t>() *
                         cfg.at("head_dim").get<std::uint64_t>() * 4u;
  for (std::int32_t streams : {3, 1}) {
    head->set_streams(64, streams);
    auto const k = head->kv();
    CHECK(static_cast<std::int64_t>(k.num_pages) * k.page_tokens >= 64 * streams);
    CHECK(head->store_bytes() == static_cast<std::uint64_t>(k.num_pages) *
                                     static_cast<std::uint64_t>(k.page_tokens) * per_token);
  }
  std::vector<std::int32_t> const pages{0};
  auto const T = static_cast<std::size_t>(o.T), V = static_cast<std::size_t>(o.V),
             H = static_cast<std::size_t>(o.H);
  std::vector<float> logits(T * V), hidden(T * H);
  tf::batch_row r{o.tokens, 0, pages, true, -1};
  head->forward({&r, 1}, o.hidden_in.data(), logits.data(), hidden.data());
  CHECK(max_abs_diff(logits, o.logits) < 1e-4f);
  CHECK(max_abs_diff(hidden, o.hidden_out) < 1e-4f);
  if (llama) {
    std::vector<float> theirs(T * V);
    std::ifstream(dir + "/llama_mtp_logits.bin", std::ios::binary)
        .read(reinterpret_cast<char*>(theirs.data()), static_cast<std::streamsize>(T * V * 4));
    CHECK(max_abs_diff(logits, theirs) < 1e-4f);
  }

  // The greedy chain: each step reads the head's own hidden state and its last token.
  std::vector<float> step(hidden.end() - static_cast<std::ptrdiff_t>(H), hidden.end());
  std::vector<float> row(logits.end() - static_cast<std::ptrdiff_t>(V), logits.end());
  for (std::int64_t j = 0; j < o.K; ++j) {
    INFO("chain step " << j);
    auto const t = argmax(row);
    CHECK(t == o.chain[static_cast<std::size_t>(j)]);
    tf::batch_row d{std::span<std::int32_t const>(&t, 1), static_cast<std::int32_t>(T + j), pages,
                    false, -1};
    std::vector<float> out(H);
    head->forward({&d, 1}, step.data(), row.data(), out.data());
    CHECK(max_abs_diff(
              row,
              std::span<float const>(o.chain_logits).subspan(static_cast<std::size_t>(j) * V, V)) <
          1e-4f);
    step = out;
  }

  // The same positions in two calls (5, then 7 reading the first 5 from the head's KV): the same
  // bits, since a row's results do not depend on its chunk.
  std::vector<float> first(V), second(7 * V);
  tf::batch_row a{std::span<std::int32_t const>(o.tokens).first(5), 0, pages, false, -1};
  head->forward({&a, 1}, o.hidden_in.data(), first.data(), nullptr);
  tf::batch_row b{std::span<std::int32_t const>(o.tokens).subspan(5), 5, pages, true, -1};
  head->forward({&b, 1}, o.hidden_in.data() + 5 * H, second.data(), nullptr);
  CHECK(
      std::equal(first.begin(), first.end(), logits.begin() + 4 * static_cast<std::ptrdiff_t>(V)));
  CHECK(std::equal(second.begin(), second.end(),
                   logits.begin() + 5 * static_cast<std::ptrdiff_t>(V)));
}

}  // namespace

// The numpy oracles run in float64, llama.cpp in f32: tf's f32 heads are within ~1e-6 of both
// (logits of ~5), as llama.cpp is of numpy.
TEST_CASE("the Qwen3.5 MTP head (HF, GGUF): within 1e-4 of the numpy oracle and llama.cpp") {
  check_head(dir, dir);
  check_head(dir, dir + "/tiny-f32.gguf");
}

// llama.cpp refuses this fixture (its qwen3next wants every layer routed; layer 1 is dense).
TEST_CASE("the Qwen3-Next MTP head (HF, GGUF; routed experts): within 1e-4 of the numpy oracle") {
  check_head(next_dir, next_dir, false);
  check_head(next_dir, next_dir + "/tiny-f32.gguf", false);
}

TEST_CASE("the GLM-4.5 next-n head (HF, GGUF): within 1e-4 of the numpy oracle and llama.cpp") {
  check_head(glm_dir, glm_dir);
  check_head(glm_dir, glm_dir + "/tiny-f32.gguf");
}

TEST_CASE("a file without mtp tensors has no MTP head") {
  auto file = model_file::open(std::string(TF_FIXTURES_DIR) + "/qwen/tiny35");
  CHECK(tf::families::open_mtp_head(file) == nullptr);
  tf::backend::cpu be;
  CHECK_THROWS_WITH(qwen::load_qwen35_mtp_weights(file, be, false),
                    Catch::Contains("carries no MTP head"));
  // tiny45's GGUF keeps only a placeholder of the next-n layer.
  auto const placeholder =
      model_file::open(std::string(TF_FIXTURES_DIR) + "/glm/tiny45/tiny-f32.gguf");
  CHECK(tf::families::open_mtp_head(placeholder) == nullptr);
  CHECK(tf::families::open_mtp_head(
            model_file::open(std::string(TF_FIXTURES_DIR) + "/glm/tiny45")) == nullptr);
}

TEST_CASE("the engine's forward with hidden states: the same logits, and the head reads them") {
  auto file = model_file::open(dir);
  tf::backend::cpu binder;
  dense_engine e(qwen::load_qwen35_weights(file, binder), {4, 64, tf::kv_dtype::f32, 2}, {1});
  STATIC_REQUIRE(dense_engine::gives_hidden);
  auto const V = static_cast<std::size_t>(e.vocab_size());
  auto const H = static_cast<std::size_t>(e.hidden_size());
  std::vector<std::int32_t> const prompt{17, 301, 44, 90, 7, 88, 400, 123, 5};  // tokens < vocab
  std::vector<std::int32_t> const pages0{0}, pages1{1};
  std::vector<float> plain(prompt.size() * V), with(prompt.size() * V), hidden(prompt.size() * H);
  tf::batch_row r0{prompt, 0, pages0, true, 0};
  e.forward({&r0, 1}, plain.data());
  tf::batch_row r1{prompt, 0, pages1, true, 1};
  e.forward({&r1, 1}, with.data(), hidden.data());
  CHECK(plain == with);
  // The hidden state is what the head reads: lm_head times it gives the logits (f32 sums in
  // another order: within 1e-4).
  auto const& out = e.bound_weights().output;
  REQUIRE(out.type == tf::model::tensor_type::f32);
  auto const* w = reinterpret_cast<float const*>(out.data);
  float worst = 0.0f;
  for (std::size_t t = 0; t < prompt.size(); ++t)
    for (std::size_t v = 0; v < V; ++v) {
      double s = 0.0;
      for (std::size_t i = 0; i < H; ++i) s += double(w[v * H + i]) * hidden[t * H + i];
      worst = std::max(worst, std::abs(static_cast<float>(s) - plain[t * V + v]));
    }
  CHECK(worst < 1e-4f);
}

namespace {

using tf::serve::generation_request;
using tf::serve::lane_host;

using served = tf::test::served_replies;

// Every request at once on `parallel` lanes of the tiny model in `dir` (Engine and Family), with
// MTP drafts or none.
template <class Engine, class Family, class Load>
served serve(std::string const& dir, Load load, std::vector<generation_request> const& reqs,
             std::size_t parallel, bool mtp) {
  auto const file = model_file::open(dir);
  tf::backend::cpu binder;
  auto const slots = Engine::has_state ? static_cast<std::int32_t>(3 * parallel + 4) : 0;
  Engine e(load(file, binder), {96, 16, tf::kv_dtype::f32, slots}, {1});
  tf::serve::draft_config drafts;
  if (mtp) {
    drafts.source =
        std::make_shared<tf::serve::mtp_draft>(tf::families::open_mtp_head(file), parallel, 256);
    drafts.max_tokens = 4;
    // Every stream drafts whatever its acceptance (the random heads' is low, below what pays
    // beside other streams): this tests the drafts' plumbing, not the round's choice.
    drafts.fixed_rows = std::numeric_limits<double>::infinity();
  }
  tf::serve::metrics m;
  lane_host<Engine, Family> host(e, {parallel, 256, 64, 64}, &m, drafts);
  CHECK(host.drafting() == mtp);
  return tf::test::serve_all(host, m, reqs);
}

std::vector<generation_request> requests(bool seeded) {
  std::vector<generation_request> reqs;
  for (int i = 0; i < 4; ++i) {
    generation_request r;
    for (int j = 0; j < 6 + 9 * i; ++j) r.prompt.push_back(3 + (37 * j + 101 * i) % 1190);
    r.max_tokens = 24;
    if (seeded) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 7 + static_cast<std::uint64_t>(i);
    }
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// Drafted replies against plain ones on the model in `dir`, greedy and seeded, 4 at once and solo.
template <class Engine, class Family, class Load>
void check_drafts(std::string const& dir, Load load) {
  for (bool const seeded : {false, true}) {
    INFO((seeded ? "seeded" : "greedy"));
    auto const reqs = requests(seeded);
    auto const plain = serve<Engine, Family>(dir, load, reqs, 4, false);
    CHECK(plain.drafted == 0);
    auto const together = serve<Engine, Family>(dir, load, reqs, 4, true);
    CHECK(together.replies == plain.replies);
    CHECK(together.drafted > 0);
    CHECK(together.accepted > 0);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      auto const solo = serve<Engine, Family>(dir, load, {reqs[i]}, 1, true);
      CHECK(solo.replies.front() == plain.replies[i]);
    }
    WARN(dir << (seeded ? " seeded" : " greedy") << ": " << together.drafted << " drafted, "
             << together.accepted << " accepted");
  }
}

}  // namespace

TEST_CASE("Qwen3.5 MTP drafts: replies equal to the replies without drafts, drafts accepted") {
  check_drafts<dense_engine, qwen::qwen35>(dir, [](model_file const& f, tf::backend::cpu& be) {
    return qwen::load_qwen35_weights(f, be);
  });
}

TEST_CASE("GLM-4.5 next-n drafts: replies equal to the replies without drafts, drafts accepted") {
  check_drafts<glm_engine, glm::glm4_moe>(glm_dir, [](model_file const& f, tf::backend::cpu& be) {
    return glm::load_moe_weights(f, be);
  });
}

TEST_CASE("Qwen3-Next MTP drafts: replies equal to the replies without drafts, drafts accepted") {
  check_drafts<next_engine, qwen::qwen3_next>(next_dir,
                                              [](model_file const& f, tf::backend::cpu& be) {
                                                return qwen::load_qwen3_next_weights(f, be);
                                              });
}

// The source keeps the head's KV and the target's states between rounds; its proposals must be
// the ones a fresh source makes from the whole history at once, bit for bit (a row's results do
// not depend on its chunk, in the target and in the head), after any mix of accepted drafts.
TEST_CASE("MTP drafts kept between rounds equal drafts made afresh from the whole history") {
  auto const file = model_file::open(dir);
  tf::backend::cpu binder;
  auto const w = qwen::load_qwen35_weights(file, binder);
  auto const V = static_cast<std::size_t>(w.hp.vocab_size);
  auto const H = static_cast<std::size_t>(w.hp.hidden_size);
  dense_engine target(w, {4, 64, tf::kv_dtype::f32, 1}, {1});
  std::vector<std::int32_t> const pages{0, 1, 2, 3};
  // Runs `toks` at `pos` in the target's stream: their hidden states, and the last logits row.
  std::vector<float> logits(V);
  auto run = [&](dense_engine& e, std::span<std::int32_t const> toks, std::int32_t pos) {
    std::vector<float> hidden(toks.size() * H);
    tf::batch_row r{toks, pos, pages, false, 0};
    e.forward({&r, 1}, logits.data(), hidden.data());
    return hidden;
  };
  tf::serve::mtp_draft kept(tf::families::open_mtp_head(file), 2, 256);
  std::vector<std::int32_t> h;
  for (int j = 0; j < 20; ++j) h.push_back(3 + (53 * j) % 1190);
  kept.observe(h, 0, run(target, h, 0));
  std::uint64_t mix = 12345;
  std::size_t accepted = 0;
  for (int round = 0; round < 12; ++round) {
    INFO("round " << round);
    auto const pos = static_cast<std::int32_t>(h.size());
    h.push_back(argmax(logits));  // the pending token
    std::vector<std::int32_t> drafts;
    kept.propose(h, 4, drafts);
    REQUIRE(drafts.size() == 4);
    // Afresh: the target over the history before the pending token, then a new source.
    dense_engine again(w, {4, 64, tf::kv_dtype::f32, 1}, {1});
    std::span<std::int32_t const> const before(h.data(), h.size() - 1);
    tf::serve::mtp_draft fresh(tf::families::open_mtp_head(file), 1, 256);
    fresh.observe(before, 0, run(again, before, 0));
    std::vector<std::int32_t> want;
    fresh.propose(h, 4, want);
    CHECK(drafts == want);
    // Accept a pseudo-random count of the drafts: the target runs the pending token and those.
    mix = mix * 6364136223846793005ull + 1442695040888963407ull;
    auto const take = static_cast<std::size_t>(mix >> 61) % 5;
    std::vector<std::int32_t> row{h.back()};
    row.insert(row.end(), drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(take));
    auto const hidden = run(target, row, pos);
    h.insert(h.end(), drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(take));
    kept.observe(h, static_cast<std::size_t>(pos), hidden);
    accepted += take;
  }
  CHECK(accepted > 0);
}
