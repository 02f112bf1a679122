// Tests include/tf/tokenizer/bpe.hpp: merge ranks, leftmost ties, unusable merges, errors.
#include <tf/tokenizer/bpe.hpp>
#include <tf/tokenizer/detail/token_index.hpp>

#include "toy_vocab.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace {

struct fixture {
  tf::tokenizer::vocab v = toy::bpe();
  tf::tokenizer::detail::token_index index = tf::tokenizer::detail::make_token_index(v);
  tf::tokenizer::bpe_model model{v, index};

  std::vector<std::int32_t> encode(const std::string& word) const {
    std::vector<std::int32_t> out;
    model.encode(word, out);
    return out;
  }
  std::int32_t id(const std::string& text) const { return index.at(text); }
};

}  // namespace

TEST_CASE("bpe applies merges by rank over the byte-level text") {
  const fixture f;
  CHECK(f.encode("hello") == std::vector{f.id("hello")});
  CHECK(f.encode(" wor") == std::vector{f.id("\xC4\xA0wor")});
  CHECK(f.encode("helo") == std::vector{f.id("he"), f.id("l"), f.id("o")});
  CHECK(f.encode("\n") == std::vector{f.id("\xC4\x8A")});
}

TEST_CASE("bpe breaks rank ties leftmost first") {
  const fixture f;
  // Every "a a" (rank 7) merges before any "aa a" (rank 8): aaaaa -> aa aa a -> aa aaa.
  CHECK(f.encode("aaaa") == std::vector{f.id("aa"), f.id("aa")});
  CHECK(f.encode("aaaaa") == std::vector{f.id("aa"), f.id("aaa")});
}

TEST_CASE("bpe skips merges whose parts are not tokens and rejects malformed ones") {
  tf::tokenizer::vocab v = toy::bpe();
  v.merges.push_back("zz zz");
  auto index = tf::tokenizer::detail::make_token_index(v);
  CHECK(tf::tokenizer::bpe_model(v, index).merge_count() == toy::bpe().merges.size());
  v.merges.push_back("nospace");
  CHECK_THROWS_WITH(tf::tokenizer::bpe_model(v, index), Catch::Contains("nospace"));
}

TEST_CASE("bpe throws when a byte has no token") {
  tf::tokenizer::vocab v = toy::bpe();
  v.tokens[0x41] = "not-a-byte";  // 'A'
  auto index = tf::tokenizer::detail::make_token_index(v);
  tf::tokenizer::bpe_model model(v, index);
  std::vector<std::int32_t> out;
  CHECK_THROWS_WITH(model.encode("A", out), Catch::Contains("0x41"));
}
