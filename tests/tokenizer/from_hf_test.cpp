// Tests include/tf/tokenizer/from_hf.hpp: small byte-level BPE tokenizer.json files trained with
// HF tokenizers (gpt2, qwen2, qwen35, glm4 split regexes; glm4 with ignore_merges as pixtral)
// against the ids HF gives.
#include <tf/tokenizer/from_hf.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::string fixture(const std::string& name) {
  return std::string(TF_FIXTURES_DIR) + "/tokenizer/" + name;
}

}  // namespace

TEST_CASE("byte-level BPE ids equal HF tokenizers' for gpt2, qwen2, qwen35 and glm4 splits") {
  for (const std::string style : {"gpt2", "qwen2", "qwen35", "glm4"}) {
    const auto tok = tf::tokenizer::load_hf_tokenizer(fixture("bpe_" + style + ".tokenizer.json"));
    CHECK(tok.vocab().pre == style);
    const auto goldens = tf::tokenizer::read_json_file(fixture("bpe_" + style + "_goldens.json"));
    REQUIRE(goldens["cases"].size() >= 50);
    for (const auto& c : goldens["cases"]) {
      const std::string text = c["text"];
      INFO(style << " text: " << text);
      const auto ids = tok.encode(text, true, true);
      CHECK(ids == c["ids"].get<std::vector<std::int32_t>>());
      CHECK(tok.decode(ids, true) == text);
      CHECK(tok.decode(tok.encode(text, false, false)) == text);
    }
  }
}

TEST_CASE("a tokenizer.json with ignore_merges takes whole-word tokens whole, as HF does") {
  // bpe_pixtral: the Llama 3 split, ignore_merges, and whole-word tokens that no merge reaches.
  const auto tok = tf::tokenizer::load_hf_tokenizer(fixture("bpe_pixtral.tokenizer.json"));
  CHECK(tok.vocab().pre == "glm4");
  CHECK(tok.vocab().ignore_merges);
  const auto goldens = tf::tokenizer::read_json_file(fixture("bpe_pixtral_goldens.json"));
  REQUIRE(goldens["cases"].size() >= 50);
  int whole = 0;
  for (const auto& word : goldens["whole_word_tokens"]) {
    const auto id = tok.token_id(word.get<std::string>());
    REQUIRE(id);
    for (const auto& c : goldens["cases"]) {
      const auto ids = c["ids"].get<std::vector<std::int32_t>>();
      whole += static_cast<int>(std::count(ids.begin(), ids.end(), *id));
    }
  }
  CHECK(whole >= 10);  // the goldens do take those tokens
  for (const auto& c : goldens["cases"]) {
    const std::string text = c["text"];
    INFO("text: " << text);
    const auto ids = tok.encode(text, true, true);
    CHECK(ids == c["ids"].get<std::vector<std::int32_t>>());
    CHECK(tok.decode(ids, true) == text);
  }
  // Without ignore_merges the same vocab merges those words into pieces.
  auto v = tok.vocab();
  v.ignore_merges = false;
  const tf::tokenizer::tokenizer merged(std::move(v));
  for (const auto& w : goldens["whole_word_tokens"]) {
    const auto id = *tok.token_id(w.get<std::string>());
    const std::string text = tok.decode(std::vector<std::int32_t>{id});
    INFO("word: " << text);
    CHECK(tok.encode(text, false, false) == std::vector<std::int32_t>{id});
    CHECK(merged.encode(text, false, false).size() > 1);
  }
}

TEST_CASE("without parse_special, a special token's text is tokenized as plain text") {
  const auto tok = tf::tokenizer::load_hf_tokenizer(fixture("bpe_qwen2.tokenizer.json"));
  const auto im_end = *tok.token_id("<|im_end|>");
  const auto parsed = tok.encode("a<|im_end|>", false, true);
  const auto plain = tok.encode("a<|im_end|>", false, false);
  CHECK(std::count(parsed.begin(), parsed.end(), im_end) == 1);
  CHECK(std::count(plain.begin(), plain.end(), im_end) == 0);
  CHECK(tok.decode(plain) == "a<|im_end|>");
  CHECK(tok.decode(parsed) == "a");
  CHECK(tok.is_eog(im_end));
}

TEST_CASE("byte-level BPE tokenizes 1 MB of text quickly") {
  const auto tok = tf::tokenizer::load_hf_tokenizer(fixture("bpe_qwen2.tokenizer.json"));
  const auto goldens = tf::tokenizer::read_json_file(fixture("bpe_qwen2_goldens.json"));
  std::string text;
  while (text.size() < (1u << 20)) {
    for (const auto& c : goldens["cases"]) text += c["text"].get<std::string>() + "\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, false, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(tok.decode(ids, true) == text);
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
  (void)s;
#else
  CHECK(s < 2.0);
#endif
}

TEST_CASE("malformed tokenizer.json is refused with a tf::error") {
  using nlohmann::json;
  CHECK_THROWS_AS(tf::tokenizer::vocab_from_hf_json(json::object()), tf::error);
  CHECK_THROWS_WITH(tf::tokenizer::vocab_from_hf_json(json{{"model", {{"type", "Unigram"}}}}),
                    Catch::Contains("Unigram"));
  auto j = tf::tokenizer::read_json_file(fixture("bpe_qwen2.tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  CHECK_THROWS_WITH(tf::tokenizer::vocab_from_hf_json(j), Catch::Contains("\\w+"));
  CHECK_THROWS_AS(tf::tokenizer::read_json_file(fixture("no_such_file.json")), tf::error);
}

TEST_CASE("tokenizer_config.json entries set bos, eos and add_bos") {
  using nlohmann::json;
  const auto j = tf::tokenizer::read_json_file(fixture("bpe_qwen2.tokenizer.json"));
  const json config{{"bos_token", "<|endoftext|>"},
                    {"eos_token", {{"content", "<|im_end|>"}}},
                    {"add_bos_token", true}};
  const tf::tokenizer::tokenizer tok(tf::tokenizer::vocab_from_hf_json(j, config));
  CHECK(tok.vocab().bos == *tok.token_id("<|endoftext|>"));
  CHECK(tok.vocab().eos == *tok.token_id("<|im_end|>"));
  const auto ids = tok.encode("hi", true, false);
  REQUIRE(ids.size() >= 2);
  CHECK(ids.front() == tok.vocab().bos);
  CHECK(tok.encode("hi", false, false).front() != tok.vocab().bos);
  const tf::tokenizer::tokenizer bare(tf::tokenizer::vocab_from_hf_json(j));
  CHECK(bare.vocab().bos == -1);
  CHECK_FALSE(bare.vocab().add_bos);
}
