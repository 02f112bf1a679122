#pragma once
/// GLM-4.5 MoE hyper-parameters read from GGUF metadata or an HF config.json.
#include <families/glm/glm4_moe_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace tf::families::glm {

/// Reads `glm4moe.*` keys from a GGUF file; block_count includes the nextn (MTP) layers, which
/// are left out of num_layers. Throws tf::error on a missing key or an unsupported gating.
template <class Gguf>
glm4_moe_hparams moe_hparams_from_gguf(Gguf const& g) {
  glm4_moe_hparams hp;
  std::string const arch(g.architecture());
  if (arch != "glm4moe")
    throw error("tf: expected a glm4moe GGUF, general.architecture is '{}'", arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: glm4moe GGUF lacks the metadata key {}", key(k));
    return static_cast<int>(*v);
  };
  auto opt_int = [&](char const* k, int d) {
    return static_cast<int>(g.get_int(key(k)).value_or(d));
  };
  hp.hidden_size = need_int("embedding_length");
  int const nextn = opt_int("nextn_predict_layers", 0);
  hp.num_layers = need_int("block_count") - nextn;
  hp.intermediate_size = need_int("feed_forward_length");
  hp.moe_intermediate_size = need_int("expert_feed_forward_length");
  hp.num_heads = need_int("attention.head_count");
  if (hp.num_heads <= 0) throw error("tf: glm4moe GGUF has {} attention heads", hp.num_heads);
  hp.num_kv_heads = opt_int("attention.head_count_kv", hp.num_heads);
  hp.head_dim = opt_int("attention.key_length", hp.hidden_size / hp.num_heads);
  hp.rope_dims = opt_int("rope.dimension_count", hp.head_dim / 2);
  hp.context_length = opt_int("context_length", 131072);
  hp.rms_norm_eps =
      static_cast<float>(g.get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
  hp.rope_theta = static_cast<float>(g.get_float(key("rope.freq_base")).value_or(1e4));
  hp.num_experts = need_int("expert_count");
  hp.experts_per_tok = need_int("expert_used_count");
  hp.num_shared_experts = opt_int("expert_shared_count", 1);
  hp.first_k_dense_replace = opt_int("leading_dense_block_count", 1);
  int const gating = opt_int("expert_gating_func", 2);
  if (gating != 2)
    throw error("tf: glm4moe GGUF {} is {}, only 2 (sigmoid) is supported",
                key("expert_gating_func"), gating);
  hp.routed_scaling_factor =
      static_cast<float>(g.get_float(key("expert_weights_scale")).value_or(1.0));
  hp.norm_topk_prob = g.get_bool(key("expert_weights_norm")).value_or(true);
  hp.n_group = 1;  // GGUF has no group keys
  hp.topk_group = 1;
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: glm4moe GGUF lacks a 2-D token_embd.weight");
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  hp.use_qk_norm = g.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  hp.attention_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  return hp;
}

/// Reads an HF GLM-4.5 config.json (v5 rope_parameters, or the legacy rope keys).
inline glm4_moe_hparams moe_hparams_from_config(nlohmann::json const& c) {
  auto const& cfg = c.contains("text_config") ? c.at("text_config") : c;
  glm4_moe_hparams hp;
  auto need = [&](char const* k) -> nlohmann::json const& {
    if (!cfg.contains(k) || cfg.at(k).is_null())
      throw error("tf: glm4_moe config.json lacks the key {}", k);
    return cfg.at(k);
  };
  auto opt = [&](nlohmann::json const& j, char const* k, double d) {
    return j.contains(k) && j.at(k).is_number() ? j.at(k).get<double>() : d;
  };
  auto flag = [&](char const* k, bool d) {
    return cfg.contains(k) && cfg.at(k).is_boolean() ? cfg.at(k).get<bool>() : d;
  };
  hp.vocab_size = model::config_int(need("vocab_size"), "vocab_size");
  hp.hidden_size = model::config_int(need("hidden_size"), "hidden_size");
  hp.intermediate_size = model::config_int(need("intermediate_size"), "intermediate_size");
  hp.moe_intermediate_size =
      model::config_int(need("moe_intermediate_size"), "moe_intermediate_size");
  hp.num_layers = model::config_int(need("num_hidden_layers"), "num_hidden_layers");
  hp.num_heads = model::config_int(need("num_attention_heads"), "num_attention_heads");
  if (hp.num_heads <= 0)
    throw error("tf: glm4_moe config.json has {} attention heads", hp.num_heads);
  hp.num_kv_heads = model::config_int(opt(cfg, "num_key_value_heads", hp.num_heads));
  hp.head_dim = model::config_int(opt(cfg, "head_dim", hp.hidden_size / hp.num_heads));
  hp.rms_norm_eps = static_cast<float>(opt(cfg, "rms_norm_eps", 1e-5));
  hp.context_length = model::config_int(opt(cfg, "max_position_embeddings", 131072));
  hp.attention_bias = flag("attention_bias", false);
  hp.use_qk_norm = flag("use_qk_norm", false);
  hp.first_k_dense_replace = model::config_int(opt(cfg, "first_k_dense_replace", 1));
  hp.num_experts = model::config_int(need("n_routed_experts"), "n_routed_experts");
  hp.experts_per_tok = model::config_int(need("num_experts_per_tok"), "num_experts_per_tok");
  hp.num_shared_experts = model::config_int(opt(cfg, "n_shared_experts", 1));
  hp.n_group = model::config_int(opt(cfg, "n_group", 1));
  hp.topk_group = model::config_int(opt(cfg, "topk_group", 1));
  hp.norm_topk_prob = flag("norm_topk_prob", true);
  hp.routed_scaling_factor = static_cast<float>(opt(cfg, "routed_scaling_factor", 1.0));
  double theta = opt(cfg, "rope_theta", 1e4);
  double factor = opt(cfg, "partial_rotary_factor", 0.5);
  if (cfg.contains("rope_parameters") && cfg.at("rope_parameters").is_object()) {
    auto const& rp = cfg.at("rope_parameters");
    if (rp.contains("rope_type") && rp.at("rope_type") != "default")
      throw error("tf: glm4_moe rope_type {} is not supported (default)",
                  rp.at("rope_type").dump());
    theta = opt(rp, "rope_theta", theta);
    factor = opt(rp, "partial_rotary_factor", factor);
  }
  hp.rope_theta = static_cast<float>(theta);
  hp.rope_dims = static_cast<int>(static_cast<double>(hp.head_dim) * factor);  // HF truncates
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline glm4_moe_hparams read_moe_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return moe_hparams_from_gguf(*g);
  return moe_hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::glm
