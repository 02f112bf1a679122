// The property exact speculative decoding rests on: a position's logits are the same bits whether
// the position runs as a one-token decode row or as row j of a (k + 1)-token verify row (one row
// with every position's logits) beside another stream's row. Checked on every tiny fixture of
// every family (dense, MoE, hybrid; F32 and Q8_0) and on the default model.
#include <tf/backend/cpu.hpp>
#include <tf/engine/open.hpp>
#include <tf/model/default_model.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../common/cannot_run.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::int32_t window = 96;  // positions per stream
constexpr std::int32_t page = 16;    // tokens per page: a verify row crosses pages

// Stream i of a loaded_model after set_streams(window, n): its own pages and state slot.
struct lane {
  tf::loaded_model& m;
  std::int32_t index;
  std::int32_t pos = 0;
  std::vector<std::int32_t> pages;

  lane(tf::loaded_model& model, std::int32_t i) : m(model), index(i) {
    auto const per = (window + page - 1) / page;
    for (std::int32_t p = 0; p < per; ++p) pages.push_back(i * per + p);
  }
  tf::batch_row row(std::span<std::int32_t const> toks, bool all) {
    bool const slotted = m.kv().num_state_slots > 0;
    tf::batch_row r{toks, pos, pages, all, slotted ? index : -1};
    pos += static_cast<std::int32_t>(toks.size());
    return r;
  }
};

// Families with recurrent layers (their state moves past rejected drafts).
bool recurrent(std::string_view family) {
  return family == "qwen35" || family == "qwen35_moe" || family == "qwen3_next" ||
         family == "nemotron_h";
}

std::vector<float> run(tf::loaded_model& m, std::span<tf::batch_row const> rows) {
  std::vector<float> out(static_cast<std::size_t>(tf::logits_rows(rows) * m.vocab_size()));
  m.forward(rows, out.data());
  return out;
}

std::int32_t argmax(std::span<float const> l) {
  return static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

std::vector<std::int32_t> random_tokens(std::int64_t vocab, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::int32_t> t;
  for (std::size_t i = 0; i < n; ++i)
    t.push_back(
        std::uniform_int_distribution<std::int32_t>(3, static_cast<std::int32_t>(vocab - 1))(gen));
  return t;
}

// Decodes `k + 1` greedy tokens one by one on stream 0, then runs the same tokens as one verify
// row on stream 1 beside a one-token row of stream 2; returns how many rows were compared and
// REQUIREs each to be the same bits.
std::size_t check_verify_rows(fs::path const& file, std::size_t k) {
  INFO(file.string());
  tf::open_options opt;
  opt.threads = 2;
  opt.page_tokens = page;
  auto m = tf::open(file, opt);
  m->set_streams(window, 4);
  auto const V = static_cast<std::size_t>(m->vocab_size());
  auto const prompt = random_tokens(m->vocab_size(), 21, 5);
  auto const other = random_tokens(m->vocab_size(), 13, 9);

  // Stream 0: the prompt, then one token per forward, each step's logits kept.
  lane solo(*m, 0);
  std::vector<std::vector<float>> steps;
  {
    auto r = solo.row(prompt, false);
    steps.push_back(run(*m, {&r, 1}));
  }
  std::vector<std::int32_t> decoded;
  for (std::size_t i = 0; i <= k; ++i) {
    decoded.push_back(argmax(steps.back()));
    auto r = solo.row(std::span<std::int32_t const>(&decoded.back(), 1), false);
    steps.push_back(run(*m, {&r, 1}));
  }

  // Stream 1 reads the prompt in two chunks; stream 2 its own prompt; then one round with
  // stream 1's verify row of k + 1 positions and stream 2's next token.
  lane verify(*m, 1), beside(*m, 2);
  {
    auto a = verify.row(std::span(prompt).first(8), false);
    run(*m, {&a, 1});
    auto b = verify.row(std::span(prompt).subspan(8), false);
    auto c = beside.row(other, false);
    tf::batch_row both[] = {b, c};
    auto const first = run(*m, both);
    REQUIRE(std::memcmp(first.data(), steps[0].data(), V * sizeof(float)) == 0);
  }
  std::int32_t next = 7;
  auto v = verify.row(std::span(decoded).first(k + 1), true);
  auto w = beside.row(std::span<std::int32_t const>(&next, 1), false);
  tf::batch_row round[] = {w, v};
  auto const out = run(*m, round);
  REQUIRE(out.size() == (k + 2) * V);
  std::size_t compared = 0;
  for (std::size_t j = 0; j <= k; ++j) {
    INFO("verify row position " << j);
    auto const got = std::span<float const>(out).subspan((j + 1) * V, V);
    CHECK(std::memcmp(got.data(), steps[j + 1].data(), V * sizeof(float)) == 0);
    ++compared;
  }
  // Rejected drafts leave K and V written past the accepted point; the stream's next rows write
  // those positions again before reading them. Stream 3's verify row has two right drafts, then
  // wrong ones; it goes on from the accepted point as stream 0 did (families whose recurrent
  // state has no per-position undo go back through the lane host's state copy instead).
  if (!recurrent(m->family())) {
    lane redo(*m, 3);
    auto p = redo.row(prompt, false);
    run(*m, {&p, 1});
    std::vector<std::int32_t> spoiled(decoded.begin(), decoded.begin() + k + 1);
    for (std::size_t j = 3; j <= k; ++j)
      spoiled[j] = 3 + (decoded[j] + 17) % static_cast<std::int32_t>(V - 3);
    auto r = redo.row(spoiled, true);
    run(*m, {&r, 1});
    redo.pos -= static_cast<std::int32_t>(k + 1 - 3);
    for (std::size_t j = 3; j <= k; ++j) {
      INFO("after rejected drafts, position " << j);
      auto one = redo.row(std::span<std::int32_t const>(&decoded[j], 1), false);
      auto const got = run(*m, {&one, 1});
      CHECK(std::memcmp(got.data(), steps[j + 1].data(), V * sizeof(float)) == 0);
      ++compared;
    }
  }
  return compared;
}

std::vector<fs::path> fixture_models() {
  std::vector<fs::path> files;
  for (auto const& e : fs::recursive_directory_iterator(TF_FIXTURES_DIR)) {
    auto const name = e.path().filename().string();
    if (name == "tiny-f32.gguf" || name == "tiny-q8_0.gguf") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("a verify row's logits equal one-token decode's, on every tiny fixture") {
  auto const files = fixture_models();
  // Dense, MoE and hybrid fixtures of Gemma 3, Qwen3(-MoE), Qwen3.5(-MoE), Qwen3-Next, GLM-4(.5)
  // and Nemotron-H, each in F32 and Q8_0.
  REQUIRE(files.size() >= 20);
  std::size_t compared = 0;
  for (auto const& f : files) {
    auto const n = check_verify_rows(f, 6);
    CHECK(n >= 7);
    compared += n;
  }
  CHECK(compared > 7 * files.size());  // the rejected-draft check ran on the attention families
}

TEST_CASE("a verify row's logits equal one-token decode's, on the default model") {
  auto const path = tf::model::resolve_model_path(std::nullopt);
  if (!fs::exists(path)) {
    tf::test::cannot_run("the default model (Gemma 3 270M Q4_K_M) is absent");
    return;
  }
  CHECK(check_verify_rows(path, 8) == 9 + 6);
}
