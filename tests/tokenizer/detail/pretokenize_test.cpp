// Tests include/tf/tokenizer/detail/pretokenize.hpp: the split rules of each regex style.
#include <tf/tokenizer/detail/pretokenize.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

using tf::tokenizer::detail::pre_style;

namespace {

std::vector<std::string> split(const std::string& text, pre_style style) {
  std::vector<std::string> out;
  for (const auto& s : tf::tokenizer::detail::pre_tokenize(text, style)) {
    out.push_back(text.substr(s.begin, s.end - s.begin));
  }
  return out;
}

using strings = std::vector<std::string>;

}  // namespace

TEST_CASE("gpt2 style: words keep one leading space, digits group, spaces leave the last") {
  const auto s = pre_style::gpt2;
  CHECK(split("Hello world", s) == strings{"Hello", " world"});
  CHECK(split("a   b", s) == strings{"a", "  ", " b"});
  CHECK(split("x 12345 !!", s) == strings{"x", " 12345", " !!"});
  CHECK(split("I'm he's", s) == strings{"I", "'m", " he", "'s"});
  CHECK(split("I'M", s) == strings{"I", "'", "M"});  // case-sensitive contractions
  CHECK(split("end  ", s) == strings{"end", "  "});
  CHECK(split("\xD0\x9F\xD1\x80\xD0\xB8 \xE4\xB8\xAD", s) ==
        strings{"\xD0\x9F\xD1\x80\xD0\xB8", " \xE4\xB8\xAD"});
}

TEST_CASE("qwen2 style: one digit at a time, newlines end punctuation and whitespace runs") {
  const auto s = pre_style::qwen2;
  CHECK(split("abc 123", s) == strings{"abc", " ", "1", "2", "3"});
  CHECK(split("I'M here", s) == strings{"I", "'M", " here"});
  CHECK(split("x;\n\ny", s) == strings{"x", ";\n\n", "y"});
  CHECK(split("a \n \n  b", s) == strings{"a", " \n \n", " ", " b"});
  CHECK(split("(hello", s) == strings{"(hello"});
  CHECK(split("\nhello", s) == strings{"\n", "hello"});
}

TEST_CASE("glm4 style: digits in groups of up to three") {
  CHECK(split("1234567", pre_style::glm4) == strings{"123", "456", "7"});
  CHECK(split("1234567", pre_style::qwen2).size() == 7);
}

TEST_CASE("pieces tile the input exactly, invalid UTF-8 included") {
  const std::string text = "a\xFF\xFE b\xE2\x82 \xF0\x9F\x98\x80\r\n  ";
  for (const auto s : {pre_style::gpt2, pre_style::qwen2, pre_style::glm4, pre_style::qwen35}) {
    std::string joined;
    for (const auto& p : split(text, s)) {
      CHECK_FALSE(p.empty());
      joined += p;
    }
    CHECK(joined == text);
  }
  CHECK(split("", pre_style::gpt2).empty());
}

TEST_CASE("qwen35 style: combining marks stay in words and leave punctuation runs") {
  const auto s = pre_style::qwen35;
  const std::string acute = "\xCC\x81";  // U+0301
  CHECK(split("e" + acute, s) == strings{"e" + acute});
  CHECK(split("e" + acute, pre_style::qwen2) == strings{"e", acute});
  CHECK(split("x" + acute + "y", s) == strings{"x" + acute + "y"});
  CHECK(split("x" + acute + "y", pre_style::qwen2) == strings{"x", acute + "y"});
  CHECK(split("!!" + acute + "a", s) == strings{"!!", acute + "a"});
  CHECK(split("!!" + acute + "a", pre_style::qwen2) == strings{"!!" + acute, "a"});
  CHECK(split("a  " + acute, s) == strings{"a", " ", " " + acute});
  CHECK(split("1" + acute + "23", s) == strings{"1", acute, "2", "3"});
  CHECK(split("I'M here", s) == strings{"I", "'M", " here"});
  // Devanagari: the vowel signs and virama (Mn/Mc) no longer cut the word.
  CHECK(
      split("\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87", s).size() ==
      1);
  CHECK(split("\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87",
              pre_style::qwen2)
            .size() == 3);
}

TEST_CASE("every style splits as llama.cpp's regex does (the regex module as oracle)") {
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/tokenizer/pre_split_goldens.json");
  REQUIRE(in.good());
  const auto g = nlohmann::json::parse(in);
  REQUIRE(g["cases"].size() >= 100);
  const std::pair<const char*, pre_style> styles[] = {{"qwen35", pre_style::qwen35},
                                                      {"qwen2", pre_style::qwen2},
                                                      {"glm4", pre_style::glm4},
                                                      {"gpt2", pre_style::gpt2}};
  int differ = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    for (const auto& [name, style] : styles) {
      INFO(name << " text: " << text);
      CHECK(split(text, style) == c[name].get<strings>());
    }
    differ += c["qwen35"] != c["qwen2"];
  }
  CHECK(differ >= 40);  // the goldens do exercise \p{M}
}
