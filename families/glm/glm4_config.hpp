#pragma once
/// GLM-4 dense hyper-parameters read from GGUF metadata or an HF config.json.
#include <families/glm/glm4_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace tf::families::glm {

/// Reads `glm4.*` keys from a GGUF file (anything with get_int/get_float, e.g.
/// tf::model::gguf_file); vocab comes from token_embd. Throws tf::error on a missing key.
template <class Gguf>
glm4_hparams hparams_from_gguf(Gguf const& g) {
  glm4_hparams hp;
  std::string const arch(g.architecture());
  if (arch != "glm4") throw error("tf: expected a glm4 GGUF, general.architecture is '{}'", arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: glm4 GGUF lacks the metadata key {}", key(k));
    return static_cast<int>(*v);
  };
  hp.hidden_size = need_int("embedding_length");
  hp.num_layers = need_int("block_count");
  hp.intermediate_size = need_int("feed_forward_length");
  hp.num_heads = need_int("attention.head_count");
  if (hp.num_heads <= 0) throw error("tf: glm4 GGUF has {} attention heads", hp.num_heads);
  hp.num_kv_heads =
      static_cast<int>(g.get_int(key("attention.head_count_kv")).value_or(hp.num_heads));
  hp.head_dim = static_cast<int>(
      g.get_int(key("attention.key_length")).value_or(hp.hidden_size / hp.num_heads));
  hp.rope_dims = static_cast<int>(g.get_int(key("rope.dimension_count")).value_or(hp.head_dim / 2));
  hp.context_length = static_cast<int>(g.get_int(key("context_length")).value_or(32768));
  hp.rms_norm_eps =
      static_cast<float>(g.get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
  hp.rope_theta = static_cast<float>(g.get_float(key("rope.freq_base")).value_or(1e4));
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: glm4 GGUF lacks a 2-D token_embd.weight");
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  return hp;
}

/// Reads an HF GLM-4 config.json (v5 rope_parameters, or the legacy rope_theta and
/// partial_rotary_factor keys).
inline glm4_hparams hparams_from_config(nlohmann::json const& c) {
  auto const& cfg = c.contains("text_config") ? c.at("text_config") : c;
  glm4_hparams hp;
  auto need = [&](char const* k) -> nlohmann::json const& {
    if (!cfg.contains(k) || cfg.at(k).is_null())
      throw error("tf: glm4 config.json lacks the key {}", k);
    return cfg.at(k);
  };
  auto opt = [&](nlohmann::json const& j, char const* k, double d) {
    return j.contains(k) && j.at(k).is_number() ? j.at(k).get<double>() : d;
  };
  hp.vocab_size = model::config_int(need("vocab_size"), "vocab_size");
  hp.hidden_size = model::config_int(need("hidden_size"), "hidden_size");
  hp.intermediate_size = model::config_int(need("intermediate_size"), "intermediate_size");
  hp.num_layers = model::config_int(need("num_hidden_layers"), "num_hidden_layers");
  hp.num_heads = model::config_int(need("num_attention_heads"), "num_attention_heads");
  if (hp.num_heads <= 0) throw error("tf: glm4 config.json has {} attention heads", hp.num_heads);
  hp.num_kv_heads = model::config_int(opt(cfg, "num_key_value_heads", hp.num_heads));
  hp.head_dim = model::config_int(opt(cfg, "head_dim", hp.hidden_size / hp.num_heads));
  hp.rms_norm_eps = static_cast<float>(opt(cfg, "rms_norm_eps", 1.5625e-7));
  hp.context_length = model::config_int(opt(cfg, "max_position_embeddings", 131072));
  hp.attention_bias = !cfg.contains("attention_bias") || cfg.at("attention_bias").get<bool>();
  double theta = opt(cfg, "rope_theta", 1e4);
  double factor = opt(cfg, "partial_rotary_factor", 0.5);
  if (cfg.contains("rope_parameters") && cfg.at("rope_parameters").is_object()) {
    auto const& rp = cfg.at("rope_parameters");
    if (rp.contains("rope_type") && rp.at("rope_type") != "default")
      throw error("tf: glm4 rope_type {} is not supported (default)", rp.at("rope_type").dump());
    theta = opt(rp, "rope_theta", theta);
    factor = opt(rp, "partial_rotary_factor", factor);
  }
  hp.rope_theta = static_cast<float>(theta);
  hp.rope_dims = static_cast<int>(static_cast<double>(hp.head_dim) * factor);  // HF truncates
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline glm4_hparams read_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return hparams_from_gguf(*g);
  return hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::glm
