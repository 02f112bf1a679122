// Regression tests for what the fuzz targets (fuzz/targets/) found; each input is also kept in
// fuzz/corpus/<target>/crash-* so the corpus replays (CTest fuzz/<target>_corpus) cover it.
// docs/reliability.md lists the findings.
#include <families/qwen/qwen3_config.hpp>
#include <tf/jinja/template.hpp>
#include <tf/serve/openai_request.hpp>
#include <tf/tokenizer/detail/unicode.hpp>
#include <tf/tokenizer/stream_decoder.hpp>
#include <tf/tokenizer/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "../tokenizer/toy_vocab.hpp"

namespace {

bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80         ? 1
                          : (c >> 5) == 6  ? 2
                          : (c >> 4) == 14 ? 3
                          : (c >> 3) == 30 ? 4
                                           : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

TEST_CASE("fuzz tokenizer: a 0xF8..0xFF lead byte is not the start of a character") {
  // fuzz/corpus/tokenizer/crash-stream-decoder-f8-lead: byte-level tokens for 0xFC then three
  // continuation bytes came out of stream_decoder unchanged, invalid UTF-8 (a JSON encoder
  // refuses it mid-stream). decode_utf8 took FC 8B 8B 8B for U+10B2CB.
  using tf::tokenizer::detail::decode_utf8;
  for (unsigned lead = 0xF8; lead <= 0xFF; ++lead) {
    std::string s(1, static_cast<char>(lead));
    s += "\x90\x8b\x8b";
    auto d = decode_utf8(s, 0);
    CHECK(d.cp == tf::tokenizer::detail::replacement_cp);
    CHECK(d.len == 1);
  }
  CHECK(decode_utf8("\xF4\x8F\xBF\xBF", 0).cp == 0x10FFFF);  // the last character still decodes

  tf::tokenizer::tokenizer tok(toy::bpe("qwen2"));
  // The byte-level token of each byte: find them by decoding every id.
  std::vector<std::int32_t> id_of(256, -1);
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(tok.n_tokens()); ++id) {
    auto piece = tok.token_to_piece(id);
    if (piece.size() == 1) id_of[static_cast<unsigned char>(piece[0])] = id;
  }
  for (int b : {0xF8, 0xFC, 0xFF}) {
    if (id_of[static_cast<std::size_t>(b)] < 0 || id_of[0x8B] < 0) continue;
    tf::tokenizer::stream_decoder sd(tok);
    std::string out = sd.feed(id_of[static_cast<std::size_t>(b)]);
    for (int k = 0; k < 3; ++k) out += sd.feed(id_of[0x8B]);
    out += sd.flush();
    INFO("lead byte " << b);
    CHECK(valid_utf8(out));
    CHECK(out == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // four U+FFFD
  }
}

// Found by fuzz/targets/hf_config (fuzz/corpus/hf_config/crash-float-to-int): the families'
// config.json readers read ints with nlohmann's get<int>(), and a float out of int's range (here
// hidden_size 6.5e35) converts with undefined behaviour (clang's UBSan stops there; the GCC
// builds do not check float casts). Now every family reads ints through model::config_int, which
// refuses them with a tf::error naming the key.
TEST_CASE("fuzz hf_config: a config.json int far out of range is refused") {
  auto cfg = nlohmann::json::parse(R"({"model_type": "qwen3", "vocab_size": 64,
      "hidden_size": 6.5e35, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000})");
  CHECK_THROWS_AS(tf::families::qwen::hparams_from_config(cfg), tf::error);
}

// Found by hand while fuzzing the request parser (the fuzzer's 16 KiB inputs cannot nest deep
// enough): a body nesting arrays 100,000 deep in a message's content or in chat_template_kwargs
// (200 KB) overflows the stack in nlohmann::json's recursive copy (json::value() and the
// assignment in parse_openai_request) and killed the server. Now a body nesting deeper than 256
// is refused with a 400 before it is parsed (include/tf/serve/detail/json_depth.hpp).
TEST_CASE("fuzz openai_request: a body nested 100,000 deep is refused, not a crash",
          "[openai-deep]") {
  std::string const nest = std::string(100000, '[') + std::string(100000, ']');
  for (std::string const& body :
       {R"({"messages":[{"role":"user","content":)" + nest + "}]}",
        R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"a":)" + nest +
            "}}"}) {
    try {
      (void)tf::serve::parse_openai_request(body, true);
      FAIL("accepted");
    } catch (tf::serve::api_error const& e) {
      CHECK(e.status == 400);
    }
  }
}
