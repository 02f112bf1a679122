// GLM-4 dense hyper-parameters from config.json (v5 and legacy rope keys) and GGUF metadata, and
// clear errors for missing or malformed tensors.
#include <families/glm/glm4_config.hpp>
#include <families/glm/glm4_weights.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/tokenizer/from_gguf.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>
#include <string_view>

namespace glm = tf::families::glm;
using tf::model::model_file;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/glm/tiny4";

tf::backend::cpu binder;  // the backend the error paths bind to

nlohmann::json base_config() {
  return {{"model_type", "glm4"},           {"vocab_size", 512},      {"hidden_size", 64},
          {"intermediate_size", 128},       {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2},       {"head_dim", 16},         {"rms_norm_eps", 1e-5},
          {"max_position_embeddings", 256}, {"attention_bias", true}};
}

// A view of a GGUF with one tensor hidden or replaced, for the error paths.
struct edited_file {
  tf::model::gguf_file const& g;
  std::string hidden;
  std::map<std::string, tf::model::tensor_view, std::less<>> replaced;

  tf::model::tensor_view const* find_tensor(std::string_view name) const {
    if (name == hidden) return nullptr;
    if (auto it = replaced.find(name); it != replaced.end()) return &it->second;
    return g.find_tensor(name);
  }
};

}  // namespace

TEST_CASE("GLM-4 config.json in the transformers v5 form (rope_parameters)") {
  auto c = base_config();
  c["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  auto hp = glm::hparams_from_config(c);
  CHECK(hp.vocab_size == 512);
  CHECK(hp.num_layers == 2);
  CHECK(hp.num_kv_heads == 2);
  CHECK(hp.head_dim == 16);
  CHECK(hp.rope_dims == 8);  // 0.5 x 16
  CHECK(hp.rope_theta == 10000.0f);
  CHECK(hp.context_length == 256);
  CHECK(hp.attention_bias);
}

TEST_CASE("GLM-4 config.json with the legacy rope keys") {
  auto c = base_config();
  c["rope_theta"] = 500000.0;
  c["partial_rotary_factor"] = 0.25;
  auto hp = glm::hparams_from_config(c);
  CHECK(hp.rope_theta == 500000.0f);
  CHECK(hp.rope_dims == 4);
  c.erase("partial_rotary_factor");
  CHECK(glm::hparams_from_config(c).rope_dims == 8);  // GLM's default is half the head
}

TEST_CASE("GLM-4 config.json errors name what is wrong") {
  auto c = base_config();
  c.erase("hidden_size");
  CHECK_THROWS_WITH(glm::hparams_from_config(c), Catch::Contains("hidden_size"));
  auto d = base_config();
  d["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK_THROWS_WITH(glm::hparams_from_config(d), Catch::Contains("yarn"));
}

TEST_CASE("GLM-4 GGUF metadata matches the committed config.json") {
  auto gg = model_file::open(tiny + "/tiny-f32.gguf");
  auto hf = model_file::open(tiny);
  auto a = glm::hparams_from_gguf(*gg.gguf());
  auto b = glm::hparams_from_config(hf.hf()->config());
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.hidden_size == b.hidden_size);
  CHECK(a.intermediate_size == b.intermediate_size);
  CHECK(a.num_layers == b.num_layers);
  CHECK(a.num_heads == b.num_heads);
  CHECK(a.num_kv_heads == b.num_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.rope_dims == b.rope_dims);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.rms_norm_eps == b.rms_norm_eps);
  CHECK(a.context_length == b.context_length);
}

TEST_CASE("a missing or malformed GLM-4 tensor is a tf::error naming it") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  auto const& g = *file.gguf();
  auto hp = glm::hparams_from_gguf(g);
  CHECK_NOTHROW(glm::bind_weights(edited_file{g, "", {}}, hp, glm::name_style::gguf, binder));
  CHECK_THROWS_WITH(
      glm::bind_weights(edited_file{g, "blk.1.attn_k.bias", {}}, hp, glm::name_style::gguf, binder),
      Catch::Contains("blk.1.attn_k.bias"));
  CHECK_THROWS_WITH(glm::bind_weights(edited_file{g, "blk.0.post_ffw_norm.weight", {}}, hp,
                                      glm::name_style::gguf, binder),
                    Catch::Contains("blk.0.post_ffw_norm.weight"));
  auto up = *g.find_tensor("blk.0.ffn_up.weight");
  up.dims = {64, 128};  // gate only: the fused half is missing
  edited_file half{g, "", {}};
  half.replaced.emplace(up.name, up);
  CHECK_THROWS_WITH(glm::bind_weights(half, hp, glm::name_style::gguf, binder),
                    Catch::Contains("blk.0.ffn_up.weight"));
  auto q = *g.find_tensor("blk.0.attn_q.weight");
  q.bytes /= 2;  // truncated data
  edited_file cut{g, "", {}};
  cut.replaced.emplace(q.name, q);
  CHECK_THROWS_WITH(glm::bind_weights(cut, hp, glm::name_style::gguf, binder),
                    Catch::Contains("blk.0.attn_q.weight"));
  auto bad = hp;
  bad.rope_dims = 18;
  CHECK_THROWS_AS(glm::bind_weights(edited_file{g, "", {}}, bad, glm::name_style::gguf, binder),
                  tf::error);
}

TEST_CASE("a GGUF of another architecture is refused") {
  auto file = model_file::open(std::string(TF_FIXTURES_DIR) + "/gemma/tiny/tiny-f32.gguf");
  CHECK_THROWS_WITH(glm::hparams_from_gguf(*file.gguf()), Catch::Contains("gemma3"));
  CHECK_THROWS_AS(glm::load_weights(file, binder), tf::error);
}

TEST_CASE("the tiny GLM-4 GGUFs carry the glm4 BPE tokenizer, sized to the model's vocab") {
  std::ifstream js(std::string(TF_FIXTURES_DIR) + "/tokenizer/bpe_glm4_goldens.json");
  REQUIRE(js.good());
  auto const goldens = nlohmann::json::parse(js);
  REQUIRE(!goldens.at("cases").empty());
  for (auto const* name : {"/tiny-f32.gguf", "/tiny-q8_0.gguf"}) {
    auto file = model_file::open(tiny + name);
    auto const tok = tf::tokenizer::load_tokenizer(*file.gguf());
    CHECK(tok.vocab().pre == "glm4");
    CHECK(static_cast<int>(tok.vocab().tokens.size()) ==
          glm::hparams_from_gguf(*file.gguf()).vocab_size);
    CHECK(tok.is_eog(*tok.token_id("<|endoftext|>")));
    for (auto const& c : goldens.at("cases")) {
      std::string const text = c.at("text");
      INFO(name << " text: " << text);
      CHECK(tok.encode(text, false, true) == c.at("ids").get<std::vector<std::int32_t>>());
    }
  }
}
