// Gemma 3 hyper-parameters from HF config.json (v5 and legacy keys) and from GGUF metadata.
#include <families/gemma/gemma3_config.hpp>
#include <tf/model/gguf.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace gemma = tf::families::gemma;

namespace {
std::string const tiny = std::string(TF_FIXTURES_DIR) + "/gemma/tiny";

nlohmann::json tiny_config() {
  std::ifstream in(tiny + "/config.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
}  // namespace

TEST_CASE("config.json (v5 rope_parameters, layer_types) and the GGUF agree") {
  auto hp = gemma::hparams_from_config(tiny_config());
  CHECK(hp.vocab_size == 512);
  CHECK(hp.hidden_size == 64);
  CHECK(hp.num_layers == 6);
  CHECK(hp.num_heads == 4);
  CHECK(hp.num_kv_heads == 1);
  CHECK(hp.head_dim == 16);
  CHECK(hp.sliding_window == 8);
  CHECK(hp.sliding_window_pattern == 6);
  CHECK(hp.rope_theta_global == 1e6f);
  CHECK(hp.rope_theta_local == 1e4f);
  CHECK(hp.query_pre_attn_scalar == 16.0f);
  for (int i = 0; i < 6; ++i) CHECK(hp.is_sliding(i) == (i != 5));

  auto g = tf::model::gguf_file::open(tiny + "/tiny-f32.gguf");
  auto gh = gemma::hparams_from_gguf(g);
  CHECK(gh.vocab_size == hp.vocab_size);
  CHECK(gh.hidden_size == hp.hidden_size);
  CHECK(gh.intermediate_size == hp.intermediate_size);
  CHECK(gh.num_layers == hp.num_layers);
  CHECK(gh.num_kv_heads == hp.num_kv_heads);
  CHECK(gh.head_dim == hp.head_dim);
  CHECK(gh.sliding_window == hp.sliding_window);
  CHECK(gh.rope_theta_local == hp.rope_theta_local);
  CHECK(gh.rope_theta_global == hp.rope_theta_global);
  CHECK(gh.query_pre_attn_scalar == hp.query_pre_attn_scalar);
  CHECK(gh.rms_norm_eps == Approx(hp.rms_norm_eps));
}

TEST_CASE("legacy rope keys and sliding_window_pattern") {
  auto c = tiny_config();
  c.erase("rope_parameters");
  c.erase("layer_types");
  c["rope_theta"] = 5e5;
  c["rope_local_base_freq"] = 2e4;
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  c["sliding_window_pattern"] = 3;
  auto hp = gemma::hparams_from_config(c);
  CHECK(hp.rope_theta_global == 5e5f);
  CHECK(hp.rope_theta_local == 2e4f);
  CHECK(hp.rope_scaling_factor == 8.0f);
  CHECK(hp.sliding_window_pattern == 3);
  CHECK_FALSE(hp.is_sliding(2));
  CHECK(hp.is_sliding(3));
}

TEST_CASE("bad configs throw tf::error") {
  auto c = tiny_config();
  c["layer_types"][1] = "full_attention";  // full at 1 and 5 only: no period fits
  CHECK_THROWS_AS(gemma::hparams_from_config(c), tf::error);
  auto d = tiny_config();
  d.erase("hidden_size");
  CHECK_THROWS_AS(gemma::hparams_from_config(d), tf::error);
  auto e = tiny_config();
  e["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
  CHECK_THROWS_AS(gemma::hparams_from_config(e), tf::error);
}
