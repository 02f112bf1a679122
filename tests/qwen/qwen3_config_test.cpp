// Qwen3 hyper-parameters from the tiny fixture's GGUF and config.json
// (fixtures/scripts/make_qwen_tiny.py), and clear errors on bad configs.
#include <families/qwen/qwen3_config.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace qwen = tf::families::qwen;
using tf::model::model_file;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/qwen/tiny";

nlohmann::json tiny_config() {
  std::ifstream f(tiny + "/config.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

// The values make_qwen_tiny.py passes to Qwen3Config.
void check_tiny(qwen::qwen3_hparams const& hp) {
  CHECK(hp.vocab_size == 1200);
  CHECK(hp.hidden_size == 64);
  CHECK(hp.intermediate_size == 128);
  CHECK(hp.num_layers == 2);
  CHECK(hp.num_heads == 4);
  CHECK(hp.num_kv_heads == 2);
  CHECK(hp.head_dim == 16);
  CHECK(hp.rope_theta == 1e6f);
  CHECK(hp.rms_norm_eps == Approx(1e-6f));
  CHECK(hp.rope_scaling_factor == 1.0f);
  CHECK_FALSE(hp.tie_word_embeddings);
  CHECK(hp.context_length == 256);
}

}  // namespace

TEST_CASE("Qwen3 hparams from the tiny GGUF") {
  auto file = model_file::open(tiny + "/tiny-f32.gguf");
  REQUIRE(file.gguf());
  check_tiny(qwen::hparams_from_gguf(*file.gguf()));
}

TEST_CASE("Qwen3 hparams from the tiny config.json (transformers v5 rope_parameters)") {
  check_tiny(qwen::hparams_from_config(tiny_config()));
}

TEST_CASE("Qwen3 hparams from a legacy config.json (rope_theta, tied, no head_dim)") {
  auto c = tiny_config();
  c.erase("rope_parameters");
  c.erase("head_dim");
  c["rope_theta"] = 5e5;
  c["tie_word_embeddings"] = true;
  auto hp = qwen::hparams_from_config(c);
  CHECK(hp.rope_theta == 5e5f);
  CHECK(hp.head_dim == 16);  // hidden / heads
  CHECK(hp.tie_word_embeddings);
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  CHECK(qwen::hparams_from_config(c).rope_scaling_factor == 4.0f);
}

TEST_CASE("bad Qwen3 configs throw a tf::error naming the problem") {
  auto c = tiny_config();
  auto msg_of = [](nlohmann::json const& j) {
    try {
      qwen::hparams_from_config(j);
    } catch (tf::error const& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto no_layers = c;
  no_layers.erase("num_hidden_layers");
  CHECK_THAT(msg_of(no_layers), Catch::Contains("num_hidden_layers"));
  auto yarn = c;
  yarn["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  CHECK_THAT(msg_of(yarn), Catch::Contains("yarn"));
  auto sliding = c;
  sliding["use_sliding_window"] = true;
  CHECK_THAT(msg_of(sliding), Catch::Contains("use_sliding_window"));
  auto zero_heads = c;
  zero_heads["num_attention_heads"] = 0;
  CHECK_THAT(msg_of(zero_heads), Catch::Contains("attention heads"));
}

TEST_CASE("a non-Qwen3 GGUF is refused by name") {
  auto file = model_file::open(std::string(TF_FIXTURES_DIR) + "/gemma/tiny/tiny-f32.gguf");
  REQUIRE(file.gguf());
  CHECK_THROWS_WITH(qwen::hparams_from_gguf(*file.gguf()), Catch::Contains("gemma3"));
}
