// The Qwen3.5 and Nemotron 3 (Nemotron-H) chat templates through the chat endpoint's own path: an
// OpenAI request body -> parse_openai_request -> the GGUF's text_codec (load_codec, as serve
// opens a model) -> encode_chat. The text must be what HF's apply_chat_template renders (jinja2)
// and the ids what llama.cpp's tokenize gives for it (fixtures/tokenizer/chat_goldens.json, made by
// fixtures/scripts/make_tokenizer_goldens.py over the tiny qwen35 / pixtral GGUF vocabs).
#include <tf/model/model_file.hpp>
#include <tf/serve/openai_request.hpp>
#include <tf/tokenizer/text_codec.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fixture(const std::string& name) {
  return std::string(TF_FIXTURES_DIR) + "/" + name;
}

}  // namespace

TEST_CASE("Qwen3.5 and Nemotron 3 chat requests render and encode as HF and llama.cpp do") {
  const auto g = nlohmann::json::parse(read_file(fixture("tokenizer/chat_goldens.json")));
  REQUIRE(g["cases"].size() >= 10);
  std::map<std::string, int> passed;
  for (const auto& c : g["cases"]) {
    const std::string name = c["name"];
    INFO("case " << name);
    const std::string path = fixture("tokenizer/" + c["gguf"].get<std::string>());
    const auto file = tf::model::model_file::open(path);
    REQUIRE(tf::tokenizer::has_tokenizer(file, path));
    const auto codec = tf::tokenizer::load_codec(file, path, name, /*builtin_template=*/{});
    // The GGUF carries the model's own template, byte for byte.
    CHECK(codec.chat_template() ==
          read_file(fixture("jinja/" + c["template_file"].get<std::string>())));
    const auto req = tf::serve::parse_openai_request(c["body"].get<std::string>(), true);
    const std::string text = codec.render_chat(req.messages, req.chat_template_kwargs);
    CHECK(text == c["text"].get<std::string>());
    const auto ids = codec.encode_chat(req.messages, req.chat_template_kwargs);
    CHECK(ids == c["ids"].get<std::vector<std::int32_t>>());
    if (text == c["text"].get<std::string>() && ids == c["ids"].get<std::vector<std::int32_t>>())
      ++passed[c["template_file"].get<std::string>()];
    // The prompt ends in the generation prompt, and the turn end is a stop token.
    CHECK(text.find("<|im_start|>assistant\n") != std::string::npos);
    CHECK(codec.tokens().is_eog(*codec.tokens().token_id("<|im_end|>")));
  }
  CHECK(passed["qwen3_5.jinja"] >= 5);
  CHECK(passed["nemotron_h.jinja"] >= 5);
}

TEST_CASE("Nemotron 3's GGUF adds BOS to the chat prompt, Qwen3.5's does not") {
  // llama.cpp: pre "pixtral" (LLAMA_VOCAB_PRE_TYPE_LLAMA3) adds BOS unless the file says not to;
  // the Qwen3.5 file says add_bos_token = false. Neither template writes BOS itself.
  const auto msgs = nlohmann::json::parse(R"([{"role":"user","content":"hi"}])");
  for (const auto& [gguf, bos_first] : std::vector<std::pair<std::string, bool>>{
           {"bpe_pixtral.gguf", true}, {"bpe_qwen35.gguf", false}}) {
    INFO(gguf);
    const std::string path = fixture("tokenizer/" + gguf);
    const auto file = tf::model::model_file::open(path);
    const auto codec = tf::tokenizer::load_codec(file, path, gguf, {});
    const auto ids = codec.encode_chat(msgs);
    REQUIRE(!ids.empty());
    CHECK((ids.front() == codec.tokens().vocab().bos) == bos_first);
    CHECK(codec.render_chat(msgs).rfind("<|im_start|>", 0) == 0);
  }
}
