// Qwen3-Next hyper-parameters from the tiny fixture's GGUFs and config.json
// (fixtures/scripts/make_qwen3_next_tiny.py) and from hand-edited configs (transformers 4 keys,
// decoder_sparse_step, no experts), and clear errors on missing or malformed keys.
#include <families/qwen/qwen35_config.hpp>
#include <families/qwen/qwen3_next_config.hpp>
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

nlohmann::json tiny_config() {
  std::ifstream f(fixtures + "/tiny3next/config.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::string message_of(nlohmann::json const& c) {
  try {
    qwen::qwen3_next_hparams_from_config(c);
  } catch (tf::error const& e) {
    return e.what();
  }
  return "";
}

constexpr auto lin = qwen35_layer::linear_attention;
constexpr auto full = qwen35_layer::full_attention;

/// Which layers route through the experts.
std::vector<bool> routed(qwen::qwen35_hparams const& hp) {
  std::vector<bool> r;
  for (int i = 0; i < hp.num_layers; ++i) r.push_back(hp.is_moe(i));
  return r;
}

/// What the config and the GGUFs agree on (the values make_qwen3_next_tiny.py passes).
void check_tiny(qwen::qwen35_hparams const& hp) {
  CHECK(hp.vocab_size == 1200);
  CHECK(hp.hidden_size == 64);
  CHECK(hp.num_layers == 4);
  CHECK(hp.num_heads == 4);
  CHECK(hp.num_kv_heads == 2);
  CHECK(hp.head_dim == 32);
  CHECK(hp.rotary_dims == 8);
  CHECK(hp.rope_theta == 1e7f);
  CHECK(hp.mrope_sections == std::array<int, 4>{0, 0, 0, 0});
  CHECK(hp.rms_norm_eps == Approx(1e-6f));
  CHECK(hp.context_length == 512);
  CHECK(hp.linear_num_key_heads == 2);
  CHECK(hp.linear_num_value_heads == 4);
  CHECK(hp.linear_key_head_dim == 16);
  CHECK(hp.linear_value_head_dim == 16);
  CHECK(hp.linear_conv_kernel_dim == 4);
  CHECK_FALSE(hp.tiled_v_heads);  // HF's grouped value heads, in both
  CHECK(hp.layer_types == std::vector{lin, lin, lin, full});
  CHECK(hp.conv_dim() == 2 * 2 * 16 + 4 * 16);
  CHECK(hp.state_floats() == 3 * 128 + 4 * 16 * 16);
  CHECK(hp.num_experts == 4);
  CHECK(hp.num_experts_per_tok == 2);
  CHECK(hp.moe_intermediate_size == 32);
  CHECK(hp.shared_expert_intermediate_size == 32);
  CHECK(hp.intermediate_size == 128);
  CHECK(hp.norm_topk_prob);
  CHECK(hp.mlp_only_layers == std::vector{1});
  CHECK(routed(hp) == std::vector<bool>{true, false, true, true});
  CHECK_FALSE(hp.tie_word_embeddings);
}

/// The error reading `gguf` with metadata key `key` renamed (the same length, another name).
std::string gguf_error_without(std::string const& gguf, std::string const& key) {
  std::ifstream in(gguf, std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(raw.size());
  std::memcpy(bytes.data(), raw.data(), raw.size());
  auto const at = std::string_view(raw.data(), raw.size()).find(key);
  REQUIRE(at != std::string_view::npos);
  bytes[at + key.size() - 1] = std::byte{'~'};
  auto g = tf::model::gguf_file::from_bytes(std::move(bytes));
  try {
    qwen::qwen3_next_hparams_from_gguf(g);
  } catch (tf::error const& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Qwen3-Next hparams from the tiny config.json and GGUFs") {
  check_tiny(qwen::qwen3_next_hparams_from_config(tiny_config()));
  for (std::string f : {"tiny-f32.gguf", "tiny-q8_0.gguf"}) {
    INFO(f);
    auto file = model_file::open(fixtures + "/tiny3next/" + f);
    REQUIRE(file.gguf());
    check_tiny(qwen::qwen3_next_hparams_from_gguf(*file.gguf()));  // dense: no ffn_gate_inp
    check_tiny(qwen::read_qwen3_next_hparams(file));
  }
  check_tiny(qwen::read_qwen3_next_hparams(model_file::open(fixtures + "/tiny3next")));
}

TEST_CASE("Qwen3-Next hparams from transformers 4 keys, decoder_sparse_step and no experts") {
  auto c = tiny_config();  // as Qwen3-Next-80B-A3B's config.json spells them
  c.erase("rope_parameters");
  c.erase("layer_types");
  c.erase("mlp_only_layers");
  c["rope_theta"] = 5e5;
  c["partial_rotary_factor"] = 0.5;
  c["rope_scaling"] = nullptr;
  c["full_attention_interval"] = 2;
  c["decoder_sparse_step"] = 2;
  c["norm_topk_prob"] = false;
  auto hp = qwen::qwen3_next_hparams_from_config(c);
  CHECK(hp.rope_theta == 5e5f);
  CHECK(hp.rotary_dims == 16);
  CHECK(hp.mrope_sections == std::array<int, 4>{0, 0, 0, 0});
  CHECK(hp.layer_types == std::vector{lin, full, lin, full});
  CHECK(routed(hp) == std::vector<bool>{false, true, false, true});
  CHECK_FALSE(hp.norm_topk_prob);
  CHECK_NOTHROW(qwen::check_qwen35_hparams(hp, "qwen3_next"));

  auto all_routed = tiny_config();
  all_routed["mlp_only_layers"] = nlohmann::json::array();
  all_routed.erase("intermediate_size");  // no dense layer needs it
  hp = qwen::qwen3_next_hparams_from_config(all_routed);
  CHECK(routed(hp) == std::vector<bool>{true, true, true, true});
  CHECK(hp.intermediate_size == 0);
  CHECK_NOTHROW(qwen::check_qwen35_hparams(hp, "qwen3_next"));

  auto dense = tiny_config();
  dense["num_experts"] = 0;
  dense.erase("num_experts_per_tok");
  hp = qwen::qwen3_next_hparams_from_config(dense);
  CHECK_FALSE(hp.is_moe());
  CHECK(routed(hp) == std::vector<bool>{false, false, false, false});
  CHECK_NOTHROW(qwen::check_qwen35_hparams(hp, "qwen3_next"));
}

TEST_CASE("Qwen3-Next config.json errors name the key") {
  auto const c = tiny_config();
  for (char const* k :
       {"hidden_size", "num_hidden_layers", "linear_num_key_heads", "linear_value_head_dim",
        "num_experts", "num_experts_per_tok", "moe_intermediate_size",
        "shared_expert_intermediate_size", "intermediate_size", "vocab_size"}) {
    auto bad = c;
    bad.erase(k);
    INFO(k);
    CHECK_THAT(message_of(bad), Catch::Contains(k));
  }
  auto other = c;
  other["model_type"] = "qwen3_5_moe_text";
  CHECK_THAT(message_of(other), Catch::Contains("expected a qwen3_next config.json"));
  CHECK_THROWS_WITH(qwen::qwen35_hparams_from_config(c), Catch::Contains("qwen3_next"));
  auto step = c;
  step["decoder_sparse_step"] = 0;
  CHECK_THAT(message_of(step), Catch::Contains("decoder_sparse_step is 0"));
  auto listed = c;
  listed["mlp_only_layers"] = "1";
  CHECK_THAT(message_of(listed), Catch::Contains("mlp_only_layers"));
  auto flag = c;
  flag["norm_topk_prob"] = "yes";
  CHECK_THAT(message_of(flag), Catch::Contains("norm_topk_prob"));
  auto rope = c;
  rope["rope_parameters"]["rope_type"] = "yarn";
  CHECK_THAT(message_of(rope), Catch::Contains("yarn"));
  auto types = c;
  types["layer_types"][1] = "sliding_attention";
  CHECK_THAT(message_of(types), Catch::Contains("sliding_attention"));
  auto top = qwen::qwen3_next_hparams_from_config(c);
  top.num_experts_per_tok = 5;  // more than the 4 experts
  CHECK_THROWS_WITH(qwen::check_qwen35_hparams(top, "qwen3_next"),
                    Catch::Contains("qwen3_next hparams are inconsistent"));
}

TEST_CASE("Qwen3-Next GGUF errors name the missing key; qwen35 and qwen3next refuse each other") {
  auto const gguf = fixtures + "/tiny3next/tiny-f32.gguf";
  for (std::string key :
       {"qwen3next.embedding_length", "qwen3next.block_count", "qwen3next.ssm.conv_kernel",
        "qwen3next.ssm.state_size", "qwen3next.ssm.group_count", "qwen3next.ssm.time_step_rank",
        "qwen3next.ssm.inner_size", "qwen3next.attention.layer_norm_rms_epsilon",
        "qwen3next.rope.dimension_count", "qwen3next.expert_count",
        "qwen3next.expert_used_count"}) {
    INFO(key);
    CHECK_THAT(gguf_error_without(gguf, key), Catch::Contains(key));
  }
  auto next = model_file::open(gguf);
  CHECK_THROWS_WITH(qwen::qwen35_hparams_from_gguf(*next.gguf()), Catch::Contains("qwen3next"));
  auto q35 = model_file::open(fixtures + "/tiny35_moe/tiny-f32.gguf");
  CHECK_THROWS_WITH(qwen::qwen3_next_hparams_from_gguf(*q35.gguf()),
                    Catch::Contains("expected a qwen3next GGUF") && Catch::Contains("qwen35moe"));
}
