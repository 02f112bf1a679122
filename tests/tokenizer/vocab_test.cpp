// Tests include/tf/tokenizer/vocab.hpp: name mapping and validation.
#include <tf/tokenizer/vocab.hpp>

#include "toy_vocab.hpp"

#include <catch2/catch.hpp>

using tf::tokenizer::model_kind;
using tf::tokenizer::token_type;

TEST_CASE("GGUF model names and token types map to the enums") {
  CHECK(tf::tokenizer::model_kind_from_name("llama") == model_kind::spm);
  CHECK(tf::tokenizer::model_kind_from_name("gpt2") == model_kind::bpe);
  CHECK_THROWS_WITH(tf::tokenizer::model_kind_from_name("rwkv"), Catch::Contains("rwkv"));
  CHECK(tf::tokenizer::model_kind_from_name("gemma4") == model_kind::spm_bpe);
  CHECK(tf::tokenizer::token_type_from_int(3) == token_type::control);
  CHECK(tf::tokenizer::token_type_from_int(6) == token_type::byte);
  CHECK(tf::tokenizer::token_type_from_int(0) == token_type::normal);
  CHECK(tf::tokenizer::token_type_from_int(99) == token_type::normal);
}

TEST_CASE("validate accepts a consistent vocab and names what is wrong otherwise") {
  auto v = toy::spm();
  CHECK_NOTHROW(v.validate());
  CHECK(v.score(0) == 0.0f);
  CHECK(v.type(1) == token_type::control);

  auto bad = v;
  bad.scores.pop_back();
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("scores"));
  bad = v;
  bad.types.push_back(token_type::normal);
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("token types"));
  bad = v;
  bad.eos = static_cast<std::int32_t>(v.size());
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("eos"));
  bad = v;
  bad.bos = -1;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("add_bos"));
  CHECK_THROWS_AS(tf::tokenizer::vocab{}.validate(), tf::error);

  tf::tokenizer::vocab bare;
  bare.tokens = {"a"};
  CHECK_NOTHROW(bare.validate());
  CHECK(bare.type(0) == token_type::normal);
  CHECK(bare.score(0) == 0.0f);
}
