// GLM-4.5 MoE hyper-parameters from config.json (v5 rope_parameters and legacy keys) and GGUF
// metadata; the expected values are the ones fixtures/scripts/make_glm_moe_tiny.py configured.
#include <families/glm/glm4_moe_config.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

namespace glm = tf::families::glm;

namespace {

std::string const tiny = std::string(TF_FIXTURES_DIR) + "/glm/tiny45";

void check_tiny(glm::glm4_moe_hparams const& hp) {
  CHECK(hp.vocab_size == 1200);
  CHECK(hp.hidden_size == 64);
  CHECK(hp.intermediate_size == 128);
  CHECK(hp.moe_intermediate_size == 32);
  CHECK(hp.num_layers == 3);
  CHECK(hp.num_heads == 4);
  CHECK(hp.num_kv_heads == 2);
  CHECK(hp.head_dim == 16);
  CHECK(hp.rope_dims == 8);
  CHECK(hp.rope_theta == 10000.0f);
  CHECK(hp.first_k_dense_replace == 1);
  CHECK(hp.num_experts == 8);
  CHECK(hp.experts_per_tok == 2);
  CHECK(hp.num_shared_experts == 1);
  CHECK(hp.norm_topk_prob);
  CHECK(hp.routed_scaling_factor == 2.5f);
  CHECK(hp.use_qk_norm);
  CHECK(hp.attention_bias);
  CHECK(hp.context_length == 256);
}

}  // namespace

TEST_CASE("GLM-4.5 MoE hparams from the tiny config.json (rope_parameters form)") {
  auto file = tf::model::model_file::open(tiny);
  auto hp = glm::moe_hparams_from_config(file.hf()->config());
  check_tiny(hp);
  CHECK(hp.n_group == 1);
  CHECK(hp.topk_group == 1);
}

TEST_CASE("GLM-4.5 MoE hparams from GGUF leave the MTP layer out of num_layers") {
  auto file = tf::model::model_file::open(tiny + "/tiny-f32.gguf");
  CHECK(file.gguf()->get_int("glm4moe.block_count").value_or(0) == 4);
  check_tiny(glm::moe_hparams_from_gguf(*file.gguf()));
}

TEST_CASE("GLM-4.5 MoE legacy rope keys, groups, and a missing key") {
  auto c = nlohmann::json::parse(R"({"vocab_size": 100, "hidden_size": 32,
    "intermediate_size": 64, "moe_intermediate_size": 16, "num_hidden_layers": 2,
    "num_attention_heads": 4, "head_dim": 8, "n_routed_experts": 16, "num_experts_per_tok": 4,
    "n_group": 4, "topk_group": 2, "rope_theta": 1000000.0, "partial_rotary_factor": 0.75})");
  auto hp = glm::moe_hparams_from_config(c);
  CHECK(hp.rope_theta == 1e6f);
  CHECK(hp.rope_dims == 6);
  CHECK(hp.num_kv_heads == 4);
  CHECK(hp.n_group == 4);
  CHECK(hp.topk_group == 2);
  c.erase("n_routed_experts");
  CHECK_THROWS_WITH(glm::moe_hparams_from_config(c), Catch::Contains("n_routed_experts"));
  c["n_routed_experts"] = 16;
  c["rope_parameters"] = {{"rope_type", "yarn"}};
  CHECK_THROWS_AS(glm::moe_hparams_from_config(c), tf::error);
}
