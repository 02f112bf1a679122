// Gemma 4's assistant drafter (families/gemma/gemma4_assistant.hpp) and its draft source
// (include/tf/serve/assistant_draft.hpp) on a tiny random-weight assistant
// (fixtures/gemma/tiny4_e/assistant-f32.gguf) beside the tiny E target: llama.cpp's own
// gemma4-assistant path as the oracle (fixtures/scripts/make_gemma4_assistant_tiny.py: three draft
// steps at the pending token's position over the target's KV), the checks of a mismatched
// pair, and drafts in the lane host whose replies equal the replies without drafts.
#include <families/gemma/gemma4.hpp>
#include <tests/common/last_logits.hpp>
#include <tests/common/served_replies.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/registry.hpp>
#include <tf/serve/assistant_draft.hpp>
#include <tf/serve/lane_host.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace gemma = tf::families::gemma;
using tf::model::model_file;
using engine = tf::engine<gemma::gemma4, tf::backend::cpu>;
using assistant = gemma::gemma4_assistant<tf::backend::cpu>;
using namespace std::chrono_literals;

namespace {

std::string const dir = std::string(TF_FIXTURES_DIR) + "/gemma/tiny4_e";
std::string const assistant_path = dir + "/assistant-f32.gguf";

struct oracle {
  std::vector<std::int32_t> prompt, step_tokens, drafts;
  std::int32_t pos0 = 0;
  std::int64_t vocab = 0, width = 0;
  std::vector<float> floats;
  nlohmann::json sections;
  std::span<float const> section(std::string const& name) const {
    for (auto const& s : sections)
      if (s.at("name") == name) {
        std::size_t n = 1;
        for (auto d : s.at("shape")) n *= d.get<std::size_t>();
        return std::span<float const>(floats).subspan(s.at("offset_floats").get<std::size_t>(), n);
      }
    FAIL("no section " << name);
    return {};
  }
};

oracle load_oracle() {
  oracle o;
  auto const j = nlohmann::json::parse(std::ifstream(dir + "/assistant-oracle.json"));
  o.prompt = j.at("prompt").get<std::vector<std::int32_t>>();
  o.step_tokens = j.at("step_tokens").get<std::vector<std::int32_t>>();
  o.drafts = j.at("draft_tokens").get<std::vector<std::int32_t>>();
  o.pos0 = j.at("pos0");
  o.vocab = j.at("vocab");
  o.width = j.at("n_embd_target");
  o.sections = j.at("bin").at("sections");
  o.floats.resize(j.at("bin").at("total_floats").get<std::size_t>());
  std::ifstream bin(dir + "/assistant-oracle.bin", std::ios::binary);
  bin.read(reinterpret_cast<char*>(o.floats.data()),
           static_cast<std::streamsize>(o.floats.size() * sizeof(float)));
  REQUIRE(bin.gcount() == static_cast<std::streamsize>(o.floats.size() * sizeof(float)));
  return o;
}

float max_diff(std::span<float const> a, std::span<float const> b) {
  REQUIRE(a.size() == b.size());
  return tf::test::compare(a, b).diff;
}

std::int32_t argmax(std::span<float const> v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

tf::backend::cpu binder;  // binds the targets' weights (host memory: any CPU engine)

}  // namespace

// llama.cpp's GELU rounds its input to f16 (a lookup table), in the target and in the assistant:
// its target states sit 6e-3 from tf's here and its drafter's logits up to 9e-3 (of logits up to
// 9.3), so 1e-2 and 1.5e-2; the drafts, each step's argmax by a margin of 0.67 or more, are
// the same.
TEST_CASE(
    "the Gemma 4 assistant: three draft steps within 1.5e-2 of llama.cpp's, the same drafts") {
  auto const o = load_oracle();
  auto const target_file = model_file::open(dir + "/tiny-share3-f32.gguf");
  for (int threads : {1, 2}) {
    INFO(threads << " threads");
    engine e(gemma::load_gemma4_weights(target_file, binder), {8, 4, tf::kv_dtype::f32, 0},
             {threads});
    std::vector<std::int32_t> pages(8);
    for (std::int32_t i = 0; i < 8; ++i) pages[static_cast<std::size_t>(i)] = 7 - i;
    tf::batch_row const prompt{o.prompt, 0, pages, true, -1};
    auto const T = static_cast<std::int64_t>(o.prompt.size());
    std::vector<float> logits(static_cast<std::size_t>(T * o.vocab)),
        hidden(static_cast<std::size_t>(T * o.width));
    e.forward({&prompt, 1}, logits.data(), hidden.data());
    // The target's own states, which the assistant reads, agree with llama.cpp's first.
    CHECK(max_diff(hidden, o.section("target_h")) < 1e-2f);
    CHECK(argmax(std::span(logits).last(static_cast<std::size_t>(o.vocab))) == o.step_tokens[0]);

    assistant a(assistant_path, e.backend(), e.kv_store(), e.bound_weights());
    REQUIRE(a.hidden_size() == o.width);
    REQUIRE(a.vocab_size() == o.vocab);
    CHECK(a.weight_bytes() == 0);  // views of the mapped file
    std::vector<float> out(static_cast<std::size_t>(o.vocab)),
        next(static_cast<std::size_t>(o.width));
    std::vector<float> step(hidden.end() - o.width, hidden.end());
    for (std::size_t i = 0; i < o.step_tokens.size(); ++i) {
      INFO("step " << i);
      auto const name = "step" + std::to_string(i);
      // Each step from llama.cpp's own input, so that one step's error does not carry on.
      auto const in = o.section(name + "_h_in");
      tf::batch_row const r{std::span(&o.step_tokens[i], 1), o.pos0, pages, false, -1};
      a.forward({&r, 1}, in.data(), out.data(), next.data());
      CHECK(max_diff(out, o.section(name + "_logits")) < 1.5e-2f);
      CHECK(max_diff(next, o.section(name + "_h_out")) < 1.5e-2f);
      CHECK(argmax(out) == o.drafts[i]);
      // And the chain from tf's own states gives the same drafts.
      tf::batch_row const own{std::span(&o.step_tokens[i], 1), o.pos0, pages, false, -1};
      a.forward({&own, 1}, step.data(), out.data(), next.data());
      CHECK(argmax(out) == o.drafts[i]);
      step = next;
    }
    // Two rows in one forward give each row's own results, bit for bit.
    std::vector<float> in2(static_cast<std::size_t>(2 * o.width));
    auto const h0 = o.section("step0_h_in"), h1 = o.section("step1_h_in");
    std::copy(h0.begin(), h0.end(), in2.begin());
    std::copy(h1.begin(), h1.end(), in2.begin() + o.width);
    tf::batch_row const two[]{{std::span(&o.step_tokens[0], 1), o.pos0, pages, false, -1},
                              {std::span(&o.step_tokens[1], 1), o.pos0 - 3, pages, false, -1}};
    std::vector<float> out2(static_cast<std::size_t>(2 * o.vocab));
    a.forward(two, in2.data(), out2.data(), nullptr);
    a.forward({&two[0], 1}, h0.data(), out.data(), nullptr);
    CHECK(std::equal(out.begin(), out.end(), out2.begin()));
    a.forward({&two[1], 1}, h1.data(), out.data(), nullptr);
    CHECK(std::equal(out.begin(), out.end(), out2.begin() + o.vocab));
  }
}

TEST_CASE("the Gemma 4 assistant refuses a target it does not fit and rows it cannot run") {
  CHECK(tf::families::registry<gemma::gemma4>::knows_drafter("gemma4-assistant"));
  CHECK_FALSE(tf::families::registry<gemma::gemma4>::knows_drafter("gemma4"));
  CHECK_FALSE(tf::families::registry<gemma::gemma4>::knows_drafter(""));
  auto const target_file = model_file::open(dir + "/tiny-share3-f32.gguf");
  engine e(gemma::load_gemma4_weights(target_file, binder), {8, 4, tf::kv_dtype::f32, 0}, {1});
  // A Gemma 4 model is not an assistant.
  CHECK_THROWS_WITH(assistant(dir + "/tiny-f32.gguf", e.backend(), e.kv_store(), e.bound_weights()),
                    Catch::Contains("expected a gemma4-assistant GGUF"));
  assistant a(assistant_path, e.backend(), e.kv_store(), e.bound_weights());
  std::vector<std::int32_t> pages{0, 1};
  std::int32_t const two_tokens[]{5, 6};
  std::vector<float> h(128), logits(1024);
  tf::batch_row const at_zero{std::span(two_tokens, 1), 0, pages, false, -1};
  CHECK_THROWS_WITH(a.forward({&at_zero, 1}, h.data(), logits.data(), nullptr),
                    Catch::Contains("after at least one target position"));
  tf::batch_row const chunk{std::span(two_tokens, 2), 3, pages, false, -1};
  CHECK_THROWS_WITH(a.forward({&chunk, 1}, h.data(), logits.data(), nullptr),
                    Catch::Contains("one token"));
}

namespace {

using served = tf::test::served_replies;

using tf::serve::generation_request;
using make_head = std::function<std::unique_ptr<tf::target_kv_head>(engine&)>;

// Every request at once on `parallel` lanes of the tiny E target, with drafts by the head `make`
// gives (none where it is empty).
served serve(std::vector<generation_request> const& reqs, std::size_t parallel,
             make_head const& make) {
  auto const file = model_file::open(dir + "/tiny-share3-f32.gguf");
  engine e(gemma::load_gemma4_weights(file, binder), {96, 16, tf::kv_dtype::f32, 0}, {1});
  tf::serve::draft_config drafts;
  if (make) {
    drafts.source = std::make_shared<tf::serve::assistant_draft>(make(e), parallel);
    drafts.max_tokens = 4;
    // Every stream drafts whatever its acceptance: this tests the plumbing, not the round's
    // choice.
    drafts.fixed_rows = std::numeric_limits<double>::infinity();
  }
  tf::serve::metrics m;
  tf::serve::lane_host<engine, gemma::gemma4> host(e, {parallel, 256, 64, 64}, &m, drafts);
  CHECK(host.drafting() == static_cast<bool>(make));
  return tf::test::serve_all(host, m, reqs);
}

std::vector<generation_request> requests(bool seeded) {
  std::vector<generation_request> reqs;
  for (int i = 0; i < 4; ++i) {
    generation_request r;
    r.prompt.push_back(2);
    for (int j = 0; j < 5 + 7 * i; ++j) r.prompt.push_back(3 + (37 * j + 101 * i) % 500);
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

make_head const tiny_assistant = [](engine& e) -> std::unique_ptr<tf::target_kv_head> {
  return std::make_unique<assistant>(assistant_path, e.backend(), e.kv_store(), e.bound_weights());
};

// A drafter that knows the plain replies: it finds the state it is handed among the target's
// final states of each request's prompt and plain reply (bit for bit, as a row's bits do not
// depend on its batch) and drafts that reply's next tokens, carrying (request, position) in the
// state it hands on. Every draft is then accepted, and each first step shows the source handed
// the target's own state of the position before the pending token; a state it cannot place, or
// a row at another position or token, is a miss.
class knowing_head final : public tf::target_kv_head {
 public:
  struct sequence {
    std::vector<std::int32_t> tokens;  // prompt and plain reply
    std::vector<float> hidden;         // the target's final state at each position
  };
  knowing_head(std::vector<sequence> known, std::int64_t width, std::int64_t vocab, int* misses)
      : known_(std::move(known)), width_(width), vocab_(vocab), misses_(misses) {}
  std::int64_t hidden_size() const override { return width_; }
  std::int64_t vocab_size() const override { return vocab_; }
  void forward(std::span<tf::batch_row const> rows, float const* hidden, float* logits,
               float* hidden_out) override {
    for (std::size_t r = 0; r < rows.size(); ++r) {
      auto const* h = hidden + static_cast<std::int64_t>(r) * width_;
      auto* l = logits + static_cast<std::int64_t>(r) * vocab_;
      std::fill(l, l + vocab_, 0.0f);
      // The request, the position before the pending token, and the drafts made so far.
      auto const [seq, before, depth] = place(h);
      auto const& row = rows[r];
      auto const next = static_cast<std::size_t>(before + 2 + depth);
      bool const ok =
          seq >= 0 && row.start_pos == before + 1 &&
          next < known_[static_cast<std::size_t>(seq)].tokens.size() &&
          (depth > 0 ||
           known_[static_cast<std::size_t>(seq)].tokens[static_cast<std::size_t>(before + 1)] ==
               row.tokens[0]);
      if (!ok) {
        ++*misses_;
        continue;
      }
      l[known_[static_cast<std::size_t>(seq)].tokens[next]] = 1.0f;
      if (hidden_out) {
        auto* o = hidden_out + static_cast<std::int64_t>(r) * width_;
        std::fill(o, o + width_, 0.0f);
        o[0] = marker;
        o[1] = static_cast<float>(seq);
        o[2] = static_cast<float>(before);
        o[3] = static_cast<float>(depth + 1);
      }
    }
  }

 private:
  static constexpr float marker = -12345.0f;
  std::tuple<int, std::int32_t, std::int32_t> place(float const* h) const {
    if (h[0] == marker)
      return {static_cast<int>(h[1]), static_cast<std::int32_t>(h[2]),
              static_cast<std::int32_t>(h[3])};
    for (std::size_t s = 0; s < known_.size(); ++s)
      for (std::size_t p = 0; p < known_[s].tokens.size(); ++p)
        if (std::equal(h, h + width_,
                       known_[s].hidden.begin() + static_cast<std::ptrdiff_t>(p) * width_))
          return {static_cast<int>(s), static_cast<std::int32_t>(p), 0};
    return {-1, 0, 0};
  }
  std::vector<sequence> known_;
  std::int64_t width_, vocab_;
  int* misses_;
};

}  // namespace

TEST_CASE("assistant drafts: replies equal to the replies without drafts, greedy and seeded") {
  for (bool const seeded : {false, true}) {
    INFO((seeded ? "seeded" : "greedy"));
    auto const reqs = requests(seeded);
    auto const plain = serve(reqs, 4, {});
    CHECK(plain.drafted == 0);
    auto const together = serve(reqs, 4, tiny_assistant);
    CHECK(together.replies == plain.replies);
    CHECK(together.drafted > 0);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      auto const solo = serve({reqs[i]}, 1, tiny_assistant);
      CHECK(solo.replies.front() == plain.replies[i]);
    }
  }
}

TEST_CASE("assistant drafts read the target's own state of the position before, and accept") {
  for (bool const seeded : {false, true}) {
    INFO((seeded ? "seeded" : "greedy"));
    auto const reqs = requests(seeded);
    auto const plain = serve(reqs, 4, {});
    // The target's final states of each prompt and plain reply, in one forward each.
    std::vector<knowing_head::sequence> known;
    {
      auto const file = model_file::open(dir + "/tiny-share3-f32.gguf");
      engine e(gemma::load_gemma4_weights(file, binder), {16, 16, tf::kv_dtype::f32, 0}, {1});
      std::vector<std::int32_t> pages(16);
      for (std::int32_t i = 0; i < 16; ++i) pages[static_cast<std::size_t>(i)] = i;
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        auto& k = known.emplace_back();
        k.tokens = reqs[i].prompt;
        k.tokens.insert(k.tokens.end(), plain.replies[i].begin(), plain.replies[i].end());
        tf::batch_row const row{k.tokens, 0, pages, true, -1};
        std::vector<float> logits(k.tokens.size() * 512);
        k.hidden.resize(k.tokens.size() * 64);
        e.forward({&row, 1}, logits.data(), k.hidden.data());
      }
    }
    int misses = 0;
    make_head const knowing = [&](engine&) -> std::unique_ptr<tf::target_kv_head> {
      return std::make_unique<knowing_head>(known, 64, 512, &misses);
    };
    auto const together = serve(reqs, 4, knowing);
    CHECK(together.replies == plain.replies);
    CHECK(misses == 0);
    CHECK(together.drafted > 0);
    CHECK(together.accepted == together.drafted);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      auto const solo = serve({reqs[i]}, 1, knowing);
      CHECK(solo.replies.front() == plain.replies[i]);
      CHECK(solo.accepted == solo.drafted);
    }
    CHECK(misses == 0);
  }
}
