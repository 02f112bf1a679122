#include <tf/model/tensor_lookup.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <filesystem>

namespace {
std::filesystem::path fixture(const char* name) {
  return std::filesystem::path(TF_FIXTURES_DIR) / "model" / name;
}
using tf::model::tensor_role;
// A map in the families' form, naming the fixtures' tensors.
constexpr std::array<tf::model::tensor_name, 4> map{{
    {tensor_role::token_embd, "t.q8_0", "model.embed_tokens.weight", false, false},
    {tensor_role::output_norm, "t.f32", "model.norm.weight", false, false},
    {tensor_role::ffn_up, "t.ffn_up.{}", "model.layers.{}.mlp.up_proj.weight", true, false},
    {tensor_role::output, "t.output", "lm_head.weight", false, true},
}};
}  // namespace

TEST_CASE("tensor_lookup: roles resolve to GGUF or HF names as fits the file") {
  auto g = tf::model::model_file::open(fixture("tiny.gguf"));
  CHECK(&tf::model::require_tensor(map, g, tensor_role::token_embd) == g.find_tensor("t.q8_0"));
  CHECK(tf::model::find_tensor(map, g, tensor_role::output) == nullptr);  // optional, absent
  CHECK_THROWS_WITH(tf::model::require_tensor(map, g, tensor_role::output),
                    Catch::Contains("t.output"));
  CHECK_THROWS_WITH(tf::model::find_tensor(map, g, tensor_role::ffn_up, 0),
                    Catch::Contains("t.ffn_up.0") && Catch::Contains("ffn_up"));
  CHECK_THROWS_WITH(tf::model::find_tensor(map, g, tensor_role::attn_q, 0),
                    Catch::Contains("attn_q"));

  auto h = tf::model::model_file::open(fixture("hf_single"));
  CHECK(tf::model::find_tensor(map, h, tensor_role::ffn_up, 1) ==
        h.find_tensor("model.layers.1.mlp.up_proj.weight"));
  CHECK(tf::model::find_tensor(map, h, tensor_role::output_norm) ==
        h.find_tensor("model.norm.weight"));
  CHECK_THROWS_WITH(tf::model::find_tensor(map, h, tensor_role::ffn_up, 7),
                    Catch::Contains("model.layers.7.mlp.up_proj.weight"));
  CHECK_THROWS_AS(tf::model::find_tensor(map, h, tensor_role::ffn_up), tf::error);  // no layer
  CHECK(tf::model::role_name(tensor_role::ssm_out) == "ssm_out");
  CHECK(tf::model::role_name(tensor_role::token_embd) == "token_embd");
}
