// Nemotron-H hyper-parameters from config.json (transformers 5 names, the checkpoints' mamba_*
// names, layers_block_type or hybrid_override_pattern) and from GGUF metadata (per-layer
// head_count_kv / feed_forward_length arrays and llama.cpp's layer-kind rule); the fixture values
// are the ones fixtures/scripts/make_nemotron_h_tiny.py configured.
#include <families/nemotron/nemotron_h.hpp>
#include <tests/nemotron/nemotron_h_fixture.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace nemo = tf::families::nemotron;
using nemo::block_kind;
using tf::test::nemotron_fixture;

namespace {

nlohmann::json small_config() {
  return nlohmann::json::parse(R"({"model_type": "nemotron_h", "vocab_size": 100,
    "hidden_size": 32, "layers_block_type": ["mamba", "attention", "mlp", "moe"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 48,
    "mamba_num_heads": 4, "mamba_head_dim": 8, "n_groups": 2, "ssm_state_size": 16,
    "conv_kernel": 4, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 16, "moe_shared_expert_intermediate_size": 24,
    "routed_scaling_factor": 2.5, "n_group": 2, "topk_group": 1, "norm_topk_prob": true,
    "layer_norm_epsilon": 1e-5, "max_position_embeddings": 512,
    "time_step_limit": [0.0, null], "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu"})");
}

std::string message_of(nlohmann::json const& c) {
  try {
    nemo::hparams_from_config(c);
  } catch (tf::error const& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Nemotron-H hparams from a config.json with every layer kind") {
  auto const hp = nemo::hparams_from_config(small_config());
  CHECK(hp.layers == std::vector<block_kind>{block_kind::mamba, block_kind::attention,
                                             block_kind::mlp, block_kind::moe});
  CHECK(hp.vocab_size == 100);
  CHECK(hp.hidden_size == 32);
  CHECK(hp.num_heads == 4);
  CHECK(hp.num_kv_heads == 2);
  CHECK(hp.head_dim == 8);
  CHECK(hp.intermediate_size == 48);
  CHECK(hp.d_inner() == 32);
  CHECK(hp.conv_dim() == 32 + 2 * 2 * 16);
  CHECK(hp.in_proj_size() == 32 + 96 + 4);
  CHECK(hp.mamba_d_conv == 4);
  CHECK(hp.dt_min == 0.0f);
  CHECK(std::isinf(hp.dt_max));
  CHECK(hp.n_routed_experts == 8);
  CHECK(hp.moe_shared_expert_intermediate_size == 24);
  CHECK(hp.routed_scaling_factor == 2.5f);
  CHECK(hp.n_group == 2);
  CHECK(hp.topk_group == 1);
  CHECK(hp.context_length == 512);
  using model = nemo::nemotron_h_model<tf::backend::cpu>;
  CHECK(model::kv_layout(hp).layers == 1);
  CHECK(model::state_layout(hp).layers == 1);
  CHECK(model::state_layout(hp).floats == 3 * 96 + 32 * 16);
}

TEST_CASE(
    "Nemotron-H layer kinds: the legacy pattern, transformers 5 names, the checkpoints' keys") {
  auto c = small_config();
  c.erase("layers_block_type");
  c["hybrid_override_pattern"] = "M*-EM";
  CHECK(nemo::hparams_from_config(c).layers ==
        std::vector<block_kind>{block_kind::mamba, block_kind::attention, block_kind::mlp,
                                block_kind::moe, block_kind::mamba});
  c["layers_block_type"] = {"linear_attention", "full_attention", "moe"};
  CHECK(nemo::hparams_from_config(c).layers ==
        std::vector<block_kind>{block_kind::mamba, block_kind::attention, block_kind::moe});
  c = small_config();
  c.erase("n_groups");
  c.erase("conv_kernel");
  c.erase("time_step_limit");
  c["mamba_n_groups"] = 4;
  c["mamba_d_conv"] = 3;
  c["mamba_dt_limit"] = {0.01, 10.0};
  auto const hp = nemo::hparams_from_config(c);
  CHECK(hp.mamba_n_groups == 4);
  CHECK(hp.mamba_d_conv == 3);
  CHECK(hp.dt_min == 0.01f);
  CHECK(hp.dt_max == 10.0f);
}

TEST_CASE("a Nemotron-H config.json with a missing or wrong key says which") {
  auto c = small_config();
  c.erase("mamba_num_heads");
  CHECK_THAT(message_of(c), Catch::Contains("mamba_num_heads"));
  c = small_config();
  c.erase("layers_block_type");
  CHECK_THAT(message_of(c), Catch::Contains("layers_block_type"));
  c = small_config();
  c["layers_block_type"] = {"mamba", "conv"};
  CHECK_THAT(message_of(c), Catch::Contains("unknown layer type 'conv'"));
  c = small_config();
  c["mlp_hidden_act"] = "gelu";
  CHECK_THAT(message_of(c), Catch::Contains("mlp_hidden_act"));
  c = small_config();
  c.erase("n_routed_experts");
  CHECK_THAT(message_of(c), Catch::Contains("n_routed_experts"));
  // Keys only a layer kind needs are not asked for without that kind.
  c["layers_block_type"] = {"mamba", "attention", "mlp"};
  CHECK_NOTHROW(nemo::hparams_from_config(c));
  // Latent MoE projections are read; a negative width is refused when binding.
  c = small_config();
  c["moe_latent_size"] = 16;
  auto hp = nemo::hparams_from_config(c);
  CHECK(hp.moe_latent_size == 16);
  CHECK_NOTHROW(nemo::check_hparams(hp));
  hp.moe_latent_size = -1;
  CHECK_THROWS_WITH(nemo::check_hparams(hp), Catch::Contains("latent"));
  // An int key written as a float outside int's range is refused, naming the key.
  c = small_config();
  c["hidden_size"] = 6.5e35;
  CHECK_THROWS_WITH(nemo::hparams_from_config(c), Catch::Contains("hidden_size"));
}

namespace {

void check_tiny(nemo::nemotron_h_hparams const& hp, bool moe) {
  CHECK(hp.vocab_size == 1200);
  CHECK(hp.hidden_size == 64);
  CHECK(hp.num_heads == 4);
  CHECK(hp.num_kv_heads == 2);
  CHECK(hp.head_dim == 16);
  CHECK(hp.mamba_num_heads == 8);
  CHECK(hp.mamba_head_dim == 16);
  CHECK(hp.mamba_n_groups == 2);
  CHECK(hp.ssm_state_size == 16);
  CHECK(hp.mamba_d_conv == 4);
  CHECK(hp.dt_min == 0.0f);
  CHECK(std::isinf(hp.dt_max));  // config.json spells it {"__float__": "Infinity"}
  CHECK(hp.layer_norm_epsilon == 1e-5f);
  if (!moe) {
    CHECK(hp.layers == std::vector<block_kind>{block_kind::mamba, block_kind::attention,
                                               block_kind::mlp, block_kind::mamba,
                                               block_kind::mlp});
    CHECK(hp.intermediate_size == 128);
    return;
  }
  CHECK(hp.layers == std::vector<block_kind>{block_kind::mamba, block_kind::attention,
                                             block_kind::moe, block_kind::mamba});
  CHECK(hp.n_routed_experts == 4);
  CHECK(hp.num_experts_per_tok == 2);
  CHECK(hp.moe_intermediate_size == 32);
  CHECK(hp.moe_shared_expert_intermediate_size == 32);
  CHECK(hp.moe_latent_size == 0);
  CHECK(hp.n_group == 1);
  CHECK(hp.topk_group == 1);
  CHECK(hp.norm_topk_prob);
  CHECK(hp.routed_scaling_factor == 2.5f);
}

std::string gguf_message_of(tf::test::gguf_edit const& g) {
  try {
    nemo::hparams_from_gguf(g);
  } catch (tf::error const& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Nemotron-H hparams of the tiny fixtures from config.json and from GGUF agree") {
  for (bool moe : {false, true}) {
    auto const dir = nemotron_fixture(moe ? "tiny_h_moe" : "tiny_h");
    INFO(dir);
    auto hf = tf::model::model_file::open(dir);
    CHECK(hf.architecture() == "nemotron_h");
    auto const from_hf = nemo::read_hparams(hf);
    check_tiny(from_hf, moe);
    CHECK(from_hf.context_length == 4096);
    for (char const* f : {"/tiny-f32.gguf", "/tiny-q8_0.gguf"}) {
      auto g = tf::model::model_file::open(dir + f);
      CHECK(g.architecture() == (moe ? "nemotron_h_moe" : "nemotron_h"));
      auto const from_gguf = nemo::read_hparams(g);
      check_tiny(from_gguf, moe);
      CHECK(from_gguf.context_length == 1 << 20);  // the converter's value for hybrids
    }
  }
}

TEST_CASE("Nemotron-H GGUF per-layer arrays give the layer kinds; a bad key says which") {
  auto file = tf::model::model_file::open(nemotron_fixture("tiny_h") + "/tiny-f32.gguf");
  tf::test::gguf_edit g{file.gguf(), {}, {}};
  CHECK(nemo::hparams_from_gguf(g).layers.size() == 5);
  // llama.cpp's rule: kv == 0 and ff == 0 -> Mamba2; ff == 0 -> attention; else MLP.
  g.arrays["nemotron_h.attention.head_count_kv"] = {0, 2, 0, 2, 0};
  g.arrays["nemotron_h.feed_forward_length"] = {0, 0, 64, 0, 0};
  auto const hp = nemo::hparams_from_gguf(g);
  CHECK(hp.layers == std::vector<block_kind>{block_kind::mamba, block_kind::attention,
                                             block_kind::mlp, block_kind::attention,
                                             block_kind::mamba});
  CHECK(hp.intermediate_size == 64);
  g.arrays["nemotron_h.attention.head_count_kv"] = {0, 2, 0, 4, 0};
  CHECK_THAT(gguf_message_of(g), Catch::Contains("KV heads"));
  g.arrays["nemotron_h.attention.head_count_kv"] = {0, 2, 0};
  CHECK_THAT(gguf_message_of(g), Catch::Contains("head_count_kv has 3 entries for 5 layers"));
  g.arrays.clear();
  for (char const* k : {"nemotron_h.ssm.state_size", "nemotron_h.ssm.time_step_rank",
                        "nemotron_h.feed_forward_length", "nemotron_h.attention.head_count_kv",
                        "nemotron_h.embedding_length"}) {
    g.dropped = {k};
    CHECK_THAT(gguf_message_of(g), Catch::Contains(k));
  }
  g.dropped.clear();
  auto moe_file = tf::model::model_file::open(nemotron_fixture("tiny_h_moe") + "/tiny-f32.gguf");
  tf::test::gguf_edit m{moe_file.gguf(), {"nemotron_h_moe.expert_used_count"}, {}};
  CHECK_THAT(gguf_message_of(m), Catch::Contains("nemotron_h_moe.expert_used_count"));
  auto other =
      tf::model::model_file::open(std::string(TF_FIXTURES_DIR) + "/qwen/tiny/tiny-f32.gguf");
  CHECK_THROWS_WITH(nemo::read_hparams(other), Catch::Contains("expected a nemotron_h"));
}
