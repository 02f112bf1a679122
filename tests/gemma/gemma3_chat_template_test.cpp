// Tests families/gemma/gemma3_chat_template.hpp: the built-in template is Gemma 3's own, and it
// reaches a codec through the family's trait (tf::builtin_chat_template), not the family's name.
#include <families/gemma/gemma3.hpp>
#include <families/qwen/qwen3.hpp>
#include <tf/family.hpp>
#include <tf/tokenizer/chat_template.hpp>
#include <tf/tokenizer/text_codec.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string read_file(std::string const& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

tf::tokenizer::tokenizer toy_tokenizer() {
  tf::tokenizer::vocab v;
  v.tokens = {"<pad>", "<eos>", "<bos>", "a"};
  v.bos = 2;
  v.eos = 1;
  return tf::tokenizer::tokenizer(std::move(v));
}

}  // namespace

TEST_CASE("built-in Gemma 3 template is Gemma 3's own") {
  std::string const file = read_file(std::string(TF_FIXTURES_DIR) + "/jinja/gemma3.jinja");
  CHECK(std::string(tf::families::gemma::gemma3_chat_template) == file);
  auto msgs = nlohmann::json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":" Hi "}])");
  auto opts = nlohmann::json::parse(R"({"add_generation_prompt":true,"bos_token":"<bos>"})");
  CHECK(tf::tokenizer::render_chat(tf::families::gemma::gemma3_chat_template, msgs, opts) ==
        "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  auto bad =
      nlohmann::json::parse(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])");
  CHECK_THROWS_WITH(tf::tokenizer::render_chat(tf::families::gemma::gemma3_chat_template, bad,
                                               nlohmann::json::object()),
                    Catch::Contains("must alternate"));
}

TEST_CASE("the family trait gives Gemma 3 its template and other families none") {
  CHECK(tf::builtin_chat_template<tf::families::gemma::gemma3>() ==
        tf::families::gemma::gemma3_chat_template);
  CHECK(tf::builtin_chat_template<tf::families::qwen::qwen3>().empty());
}

TEST_CASE("a codec without a file template takes the built-in one, a file's template wins") {
  auto const builtin = tf::builtin_chat_template<tf::families::gemma::gemma3>();
  tf::tokenizer::text_codec const fallback(toy_tokenizer(), "toy", "", builtin);
  CHECK(fallback.chat_template() == builtin);
  auto const msgs = nlohmann::json::parse(R"([{"role":"user","content":"Hi"}])");
  CHECK(fallback.render_chat(msgs) ==
        "<bos><start_of_turn>user\nHi<end_of_turn>\n"
        "<start_of_turn>model\n");
  tf::tokenizer::text_codec const own(toy_tokenizer(), "toy", "{{ 'x' }}", builtin);
  CHECK(own.chat_template() == "{{ 'x' }}");
  tf::tokenizer::text_codec const none(toy_tokenizer(), "toy");
  CHECK(none.chat_template().empty());
  CHECK_THROWS_WITH(none.render_chat(msgs), Catch::Contains("no tokenizer.chat_template"));
}
