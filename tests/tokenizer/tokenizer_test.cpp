// Tests include/tf/tokenizer/tokenizer.hpp on hand-made vocabs: special-token matching, BOS/EOS
// rules, space escaping and prefix, decode of each token type, end-of-generation ids.
#include <tf/tokenizer/tokenizer.hpp>

#include "toy_vocab.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using tf::tokenizer::tokenizer;

namespace {

std::int32_t id(const tokenizer& t, const std::string& text) {
  return *t.token_id(text);
}

}  // namespace

TEST_CASE("control tokens match in the text only with parse_special") {
  const tokenizer t(toy::spm());
  const auto sot = id(t, "<start_of_turn>");
  const auto parsed = t.encode("<start_of_turn>hello", false, true);
  CHECK(parsed == std::vector{sot, id(t, "hello")});
  const auto plain = t.encode("<start_of_turn>hello", false, false);
  CHECK(std::find(plain.begin(), plain.end(), sot) == plain.end());
  CHECK(plain.back() == id(t, "hello"));
  CHECK(t.decode(plain) == "<start_of_turn>hello");
  CHECK(t.decode(parsed) == "hello");
  CHECK(t.decode(parsed, true) == "<start_of_turn>hello");
}

TEST_CASE("user-defined tokens always match, splitting the text around them") {
  const tokenizer t(toy::spm());
  const auto nl = id(t, "\n");
  for (const bool special : {false, true}) {
    CHECK(t.encode("hello\nhello", false, special) ==
          std::vector{id(t, "hello"), nl, id(t, "hello")});
  }
}

TEST_CASE("the longest special token wins where several start at one place") {
  auto v = toy::spm();
  v.tokens.push_back("<start_of_turn>x");
  v.scores.push_back(0);
  v.types.push_back(tf::tokenizer::token_type::control);
  const tokenizer t(std::move(v));
  CHECK(t.encode("<start_of_turn>x", false, true) == std::vector{id(t, "<start_of_turn>x")});
  CHECK(t.encode("<start_of_turn>y", false, true).front() == id(t, "<start_of_turn>"));
}

TEST_CASE("add_bos adds what the vocab asks for, and only then") {
  auto v = toy::spm();
  v.add_eos = true;
  const tokenizer t(v);
  CHECK(t.encode("", true, false) == std::vector<std::int32_t>{v.bos, v.eos});
  CHECK(t.encode("", false, false).empty());
  CHECK(t.encode("hello", true, false) == std::vector{v.bos, id(t, "hello"), v.eos});
  v.add_bos = false;
  v.add_eos = false;
  CHECK(tokenizer(v).encode("hello", true, false) == std::vector{id(t, "hello")});
}

TEST_CASE("spaces become U+2581, with a prefix space where the vocab asks") {
  const tokenizer plain(toy::spm(false));
  CHECK(plain.encode("hello world", false, false) ==
        std::vector{id(plain, "hello"), id(plain, "\xE2\x96\x81world")});
  const tokenizer prefixed(toy::spm(true));
  const auto ids = prefixed.encode("hello world", false, false);
  CHECK(ids == std::vector{id(prefixed, "\xE2\x96\x81hello"), id(prefixed, "\xE2\x96\x81world")});
  // The prefix space also follows a special token, and decode removes the first one.
  CHECK(prefixed.encode("<s>hello", false, true) ==
        std::vector{id(prefixed, "<s>"), id(prefixed, "\xE2\x96\x81hello")});
  CHECK(prefixed.decode(ids) == "hello world");
  CHECK(prefixed.token_to_piece(ids[0]) == " hello");
}

TEST_CASE("decode renders byte tokens as bytes and rejects ids outside the vocab") {
  const tokenizer t(toy::spm());
  const std::string euro = "\xE2\x82\xAC";
  const auto ids = t.encode("a" + euro + "b", false, false);
  CHECK(ids.size() == 5);
  CHECK(t.decode(ids) == "a" + euro + "b");
  CHECK(t.token_to_piece(id(t, "<0xE2>")) == "\xE2");
  CHECK(t.token_to_piece(id(t, "</s>")).empty());
  CHECK(t.token_to_piece(id(t, "</s>"), true) == "</s>");
  CHECK_THROWS_AS(t.decode(std::vector<std::int32_t>{-1}), tf::error);
  CHECK_THROWS_WITH(t.token_to_piece(static_cast<std::int32_t>(t.n_tokens())),
                    Catch::Contains("outside the vocab"));
}

TEST_CASE("is_eog covers eos, eot and known end-of-turn control tokens") {
  const tokenizer t(toy::spm());
  CHECK(t.is_eog(t.vocab().eos));
  CHECK(t.is_eog(id(t, "<end_of_turn>")));
  CHECK(t.vocab().eot == id(t, "<end_of_turn>"));
  CHECK_FALSE(t.is_eog(t.vocab().bos));
  CHECK_FALSE(t.is_eog(id(t, "<start_of_turn>")));
  CHECK_FALSE(t.is_eog(-5));
}

TEST_CASE("byte-level BPE encodes through the pre-tokenizer and decodes back to bytes") {
  const tokenizer t(toy::bpe("qwen2"));
  const auto ids = t.encode("hello world", false, false);
  CHECK(ids.front() == id(t, "hello"));
  CHECK(ids[1] == id(t, "\xC4\xA0wor"));
  CHECK(t.decode(ids) == "hello world");
  const std::string odd = "\x00\xFF\xC3 \xE2\x82\xAC\n\t";
  CHECK(t.decode(t.encode(odd, false, false)) == odd);
  CHECK(t.encode("hello<|im_end|>", false, true).back() == id(t, "<|im_end|>"));
  CHECK(t.is_eog(id(t, "<|im_end|>")));
  CHECK(t.is_eog(t.vocab().eos));
}

TEST_CASE("a BPE vocab with an unknown pre-tokenizer is refused") {
  CHECK_THROWS_WITH(tokenizer(toy::bpe("mystery")), Catch::Contains("mystery"));
  CHECK_THROWS_WITH(tokenizer(toy::bpe("mystery")), Catch::Contains("qwen35, glm4"));
  CHECK_THROWS_WITH(tokenizer(toy::bpe("mystery")), Catch::Contains("pixtral"));
  CHECK_NOTHROW(tokenizer(toy::bpe("gpt2")));
  CHECK_NOTHROW(tokenizer(toy::bpe("glm4")));
  CHECK_NOTHROW(tokenizer(toy::bpe("qwen35")));
  CHECK_NOTHROW(tokenizer(toy::bpe("pixtral")));
}

TEST_CASE("Llama 3 pre names take a pre-token that is a whole token whole (ignore_merges)") {
  // "hellx" is a token no merge reaches: the merges stop at "hell" + "x".
  auto with_word = [](std::string pre) {
    auto v = toy::bpe(std::move(pre));
    v.tokens.push_back("hellx");
    v.types.push_back(tf::tokenizer::token_type::normal);
    return tokenizer(std::move(v));
  };
  for (const char* pre : {"pixtral", "llama-bpe", "llama3"}) {
    const auto t = with_word(pre);
    CHECK(t.encode("hellx", false, false) == std::vector{id(t, "hellx")});
  }
  for (const char* pre : {"glm4", "qwen2", "qwen35"}) {
    const auto t = with_word(pre);
    CHECK(t.encode("hellx", false, false) == std::vector{id(t, "hell"), id(t, "x")});
  }
}

TEST_CASE("copies share the tables and stay valid after the original is gone") {
  auto made = std::make_unique<tokenizer>(toy::spm());
  const tokenizer copy = *made;
  const auto want = made->encode("hello world", true, true);
  made.reset();
  CHECK(copy.encode("hello world", true, true) == want);
}

TEST_CASE("the gemma4 kind merges characters, splits off newline runs and falls back to bytes") {
  const tokenizer t(toy::spm_bpe());
  const auto sp = [&](const std::string& s) { return id(t, s); };
  // Spaces become U+2581 with no prefix; merges run over characters by rank.
  CHECK(t.encode("hello world", false, false) ==
        std::vector<std::int32_t>{sp("hello"), sp("\xE2\x96\x81wor"), sp("l"), sp("d")});
  CHECK(t.encode(" hello", false, false) == std::vector<std::int32_t>{sp("\xE2\x96\x81hello")});
  // A newline run that is a token is taken whole; a longer one merges its pieces; the text
  // either side merges on its own (no merge across a newline).
  CHECK(t.encode("a\n\nb", false, false) ==
        std::vector<std::int32_t>{sp("a"), sp("\n\n"), sp("b")});
  CHECK(t.encode("aa\n\n\naa", false, false) ==
        std::vector<std::int32_t>{sp("aa"), sp("\n"), sp("\n"), sp("\n"), sp("aa")});
  // A character with no token falls back to its UTF-8 bytes, as do invalid bytes.
  CHECK(t.encode("z\xC3\xA9", false, false) ==
        std::vector<std::int32_t>{sp("<0x7A>"), sp("<0xC3>"), sp("<0xA9>")});
  // A lead byte takes as many bytes as it announces (llama.cpp's cut), valid or not.
  CHECK(t.encode("\xFF"
                 "a",
                 false, false) == std::vector<std::int32_t>{sp("<0xFF>"), sp("<0x61>")});
  CHECK(t.encode("a\xFF", false, false) == std::vector<std::int32_t>{sp("a"), sp("<0xFF>")});
  // BOS as asked; user-defined marks always match; decode is SentencePiece's.
  const auto ids = t.encode("<bos>x <|tool_call>hello", true, true);
  CHECK(ids.front() == t.vocab().bos);
  CHECK(ids[1] == t.vocab().bos);
  CHECK(t.decode(ids) == "x <|tool_call>hello");
  CHECK(t.is_eog(sp("<turn|>")));
  CHECK(t.decode(t.encode(" hello world\n\nz\xC3\xA9", false, false)) ==
        " hello world\n\nz\xC3\xA9");
}
