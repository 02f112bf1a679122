// Qwen3.5 hyper-parameters from the tiny fixtures' GGUF and config.json
// (fixtures/scripts/make_qwen35_tiny.py) and from hand-written configs (the multimodal wrapper,
// legacy rope keys, full_attention_interval), and clear errors on missing keys.
#include <families/qwen/qwen35_config.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace qwen = tf::families::qwen;
using qwen::qwen35_layer;
using tf::model::model_file;

namespace {

std::string const fixtures = std::string(TF_FIXTURES_DIR) + "/qwen";

nlohmann::json config_of(std::string const& dir) {
  std::ifstream f(fixtures + "/" + dir + "/config.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::string message_of(nlohmann::json const& c) {
  try {
    qwen::qwen35_hparams_from_config(c);
  } catch (tf::error const& e) {
    return e.what();
  }
  return "";
}

constexpr auto lin = qwen35_layer::linear_attention;
constexpr auto full = qwen35_layer::full_attention;

// What both tiny models share (the values make_qwen35_tiny.py passes to the config).
void check_tiny(qwen::qwen35_hparams const& hp) {
  CHECK(hp.hidden_size == 64);
  CHECK(hp.num_layers == 5);
  CHECK(hp.num_heads == 4);
  CHECK(hp.num_kv_heads == 2);
  CHECK(hp.head_dim == 64);
  CHECK(hp.rotary_dims == 16);
  CHECK(hp.rope_theta == 1e7f);
  CHECK(hp.mrope_sections == std::array<int, 4>{3, 3, 2, 0});
  CHECK(hp.rms_norm_eps == Approx(1e-6f));
  CHECK(hp.linear_num_key_heads == 2);
  CHECK(hp.linear_num_value_heads == 4);
  CHECK(hp.linear_key_head_dim == 16);
  CHECK(hp.linear_value_head_dim == 16);
  CHECK(hp.linear_conv_kernel_dim == 4);
  CHECK(hp.layer_types == std::vector{lin, lin, lin, full, lin});
  CHECK(hp.conv_dim() == 2 * 2 * 16 + 4 * 16);
  CHECK(hp.state_floats() == 3 * 128 + 4 * 16 * 16);
  CHECK_FALSE(hp.tie_word_embeddings);
}

}  // namespace

TEST_CASE("Qwen3.5 hparams from the tiny GGUFs and config.json files") {
  for (std::string dir : {"tiny35", "tiny35_moe"}) {
    INFO(dir);
    bool const moe = dir == "tiny35_moe";
    auto const from_config = qwen::qwen35_hparams_from_config(config_of(dir));
    check_tiny(from_config);
    CHECK_FALSE(from_config.tiled_v_heads);
    for (std::string f : {"tiny-f32.gguf", "tiny-q8_0.gguf"}) {
      auto file = model_file::open(fixtures + "/" + dir + "/" + f);
      REQUIRE(file.gguf());
      auto const hp = qwen::qwen35_hparams_from_gguf(*file.gguf());
      check_tiny(hp);
      CHECK(hp.tiled_v_heads);  // llama.cpp's converter tiles the value heads
      CHECK(hp.vocab_size == from_config.vocab_size);
      CHECK(hp.is_moe() == moe);
      CHECK(hp.num_experts == from_config.num_experts);
      CHECK(hp.num_experts_per_tok == from_config.num_experts_per_tok);
      CHECK(hp.moe_intermediate_size == from_config.moe_intermediate_size);
      CHECK(hp.shared_expert_intermediate_size == from_config.shared_expert_intermediate_size);
      if (!moe) CHECK(hp.intermediate_size == from_config.intermediate_size);
    }
    if (moe) {
      CHECK(from_config.num_experts == 4);
      CHECK(from_config.num_experts_per_tok == 2);
      CHECK(from_config.moe_intermediate_size == 32);
      CHECK(from_config.shared_expert_intermediate_size == 32);
    } else {
      CHECK(from_config.intermediate_size == 128);
    }
  }
}

TEST_CASE("Qwen3.5 hparams from a multimodal wrapper's text_config") {
  auto text = config_of("tiny35");
  nlohmann::json wrapper{{"model_type", "qwen3_5"},
                         {"tie_word_embeddings", true},
                         {"text_config", text},
                         {"vision_config", {{"depth", 2}}}};
  auto hp = qwen::qwen35_hparams_from_config(wrapper);
  CHECK(hp.hidden_size == 64);
  CHECK(hp.layer_types == std::vector{lin, lin, lin, full, lin});
  CHECK(hp.tie_word_embeddings);  // the wrapper's own key decides
  wrapper["text_config"].erase("linear_num_value_heads");
  CHECK_THAT(message_of(wrapper), Catch::Contains("text_config.linear_num_value_heads"));
}

TEST_CASE("Qwen3.5 hparams from legacy rope keys and full_attention_interval") {
  auto c = config_of("tiny35");
  c.erase("rope_parameters");
  c.erase("layer_types");
  c["rope_theta"] = 5e5;
  c["partial_rotary_factor"] = 0.5;
  c["full_attention_interval"] = 2;
  auto hp = qwen::qwen35_hparams_from_config(c);
  CHECK(hp.rope_theta == 5e5f);
  CHECK(hp.rotary_dims == 32);
  CHECK(hp.mrope_sections == std::array<int, 4>{11, 11, 10, 0});
  CHECK(hp.layer_types == std::vector{lin, full, lin, full, lin});
  c.erase("full_attention_interval");
  c.erase("partial_rotary_factor");
  hp = qwen::qwen35_hparams_from_config(c);
  CHECK(hp.rotary_dims == 16);  // transformers' default fraction 0.25
  CHECK(hp.layer_types == std::vector{lin, lin, lin, full, lin});
}

TEST_CASE("Qwen3.5 config.json errors name the key") {
  auto const c = config_of("tiny35");
  for (char const* k : {"hidden_size", "num_hidden_layers", "linear_num_key_heads",
                        "linear_key_head_dim", "intermediate_size", "vocab_size"}) {
    auto bad = c;
    bad.erase(k);
    INFO(k);
    CHECK_THAT(message_of(bad), Catch::Contains(k));
  }
  auto moe = config_of("tiny35_moe");
  moe.erase("shared_expert_intermediate_size");
  CHECK_THAT(message_of(moe), Catch::Contains("shared_expert_intermediate_size"));
  auto types = c;
  types["layer_types"][1] = "sliding_attention";
  CHECK_THAT(message_of(types), Catch::Contains("sliding_attention"));
  types["layer_types"] = {"linear_attention", "full_attention"};
  CHECK_THAT(message_of(types), Catch::Contains("2 layer_types for 5 layers"));
  auto rope = c;
  rope["rope_parameters"]["rope_type"] = "yarn";
  CHECK_THAT(message_of(rope), Catch::Contains("yarn"));
  auto other = c;
  other["model_type"] = "qwen3_next";
  CHECK_THAT(message_of(other), Catch::Contains("qwen3_next"));
}

TEST_CASE("Qwen3.5 GGUF errors name the missing key") {
  // A GGUF is checked key by key: drop each required key by renaming it in a copy of the bytes.
  std::ifstream in(fixtures + "/tiny35/tiny-f32.gguf", std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (std::string key :
       {"qwen35.rope.dimension_sections", "qwen35.ssm.conv_kernel", "qwen35.ssm.group_count",
        "qwen35.ssm.inner_size", "qwen35.attention.layer_norm_rms_epsilon",
        "qwen35.rope.dimension_count", "qwen35.feed_forward_length"}) {
    std::vector<std::byte> bytes(raw.size());
    std::memcpy(bytes.data(), raw.data(), raw.size());
    std::string_view const all(raw.data(), raw.size());
    auto at = all.find(key);
    REQUIRE(at != std::string_view::npos);
    bytes[at + key.size() - 1] = std::byte{'~'};  // the same length, another name
    auto g = tf::model::gguf_file::from_bytes(std::move(bytes));
    std::string msg;
    try {
      qwen::qwen35_hparams_from_gguf(g);
    } catch (tf::error const& e) {
      msg = e.what();
    }
    INFO(key);
    CHECK_THAT(msg, Catch::Contains(key));
  }
}
