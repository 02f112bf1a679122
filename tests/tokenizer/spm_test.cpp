// Tests include/tf/tokenizer/spm.hpp: score order, leftmost ties and byte fallback.
#include <tf/tokenizer/detail/token_index.hpp>
#include <tf/tokenizer/spm.hpp>

#include "toy_vocab.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

struct fixture {
  tf::tokenizer::vocab v = toy::spm();
  tf::tokenizer::detail::token_index index = tf::tokenizer::detail::make_token_index(v);
  tf::tokenizer::spm_model model{v, index};

  std::vector<std::int32_t> encode(const std::string& text) const {
    std::vector<std::int32_t> out;
    model.encode(text, out);
    return out;
  }
  std::int32_t id(const std::string& text) const { return index.at(text); }
};

}  // namespace

TEST_CASE("spm merges the highest-scoring pair first") {
  const fixture f;
  CHECK(f.encode("hello\xE2\x96\x81world") ==
        std::vector{f.id("hello"), f.id("\xE2\x96\x81world")});
  // "bc" (-2) outscores "ab" (-3), so "abc" is a + bc, not ab + c.
  CHECK(f.encode("abc") == std::vector{f.id("a"), f.id("bc")});
}

TEST_CASE("spm breaks score ties leftmost first") {
  const fixture f;
  CHECK(f.encode("aaa") == std::vector{f.id("aa"), f.id("a")});
  CHECK(f.encode("aaaa") == std::vector{f.id("aa"), f.id("aa")});
}

TEST_CASE("spm falls back to <0xNN> byte tokens for characters no token covers") {
  const fixture f;
  CHECK(f.encode("\xE2\x82\xAC") == std::vector{f.id("<0xE2>"), f.id("<0x82>"), f.id("<0xAC>")});
  CHECK(f.encode("h\xFF") == std::vector{f.id("h"), f.id("<0xFF>")});
  CHECK(f.model.byte_id(0x41) == f.id("<0x41>"));
  CHECK(f.encode("").empty());
}

TEST_CASE("spm without byte tokens uses unk, and throws without unk") {
  tf::tokenizer::vocab v;
  v.tokens = {"<unk>", "a"};
  v.unk = 0;
  auto index = tf::tokenizer::detail::make_token_index(v);
  tf::tokenizer::spm_model with_unk(v, index);
  std::vector<std::int32_t> out;
  with_unk.encode("az", out);
  CHECK(out == std::vector<std::int32_t>{1, 0});
  v.unk = -1;
  tf::tokenizer::spm_model without_unk(v, index);
  out.clear();
  CHECK_THROWS_AS(without_unk.encode("z", out), tf::error);
}
