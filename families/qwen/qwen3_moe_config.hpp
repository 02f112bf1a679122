#pragma once
/// Qwen3-MoE hyper-parameters read from GGUF metadata or an HF config.json.
#include <families/qwen/qwen3_config.hpp>
#include <families/qwen/qwen3_moe_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <string>

namespace tf::families::qwen {

/// Reads `qwen3moe.*` keys: Qwen3's, plus expert_count, expert_used_count and
/// expert_feed_forward_length. A layer without blk.N.ffn_gate_inp.weight has a dense MLP.
template <class Gguf>
qwen3_moe_hparams moe_hparams_from_gguf(Gguf const& g) {
  std::string const arch(g.architecture());
  if (arch != "qwen3moe")
    throw error("tf: expected a qwen3moe GGUF, general.architecture is '{}'", arch);
  qwen3_moe_hparams hp;
  static_cast<qwen3_hparams&>(hp) = hparams_from_gguf(g, arch);
  auto need_int = [&](char const* k) {
    auto v = g.get_int(arch + "." + k);
    if (!v) throw error("tf: qwen3moe GGUF lacks the metadata key {}.{}", arch, k);
    return static_cast<int>(*v);
  };
  hp.num_experts = need_int("expert_count");
  hp.num_experts_per_tok = need_int("expert_used_count");
  hp.moe_intermediate_size = need_int("expert_feed_forward_length");
  hp.norm_topk_prob = true;  // llama.cpp's qwen3moe always renormalises the top-k weights
  for (int i = 0; i < hp.num_layers; ++i)
    if (!g.find_tensor("blk." + std::to_string(i) + ".ffn_gate_inp.weight"))
      hp.mlp_only_layers.push_back(i);
  return hp;
}

/// Reads an HF Qwen3-MoE config.json (model_type qwen3_moe).
inline qwen3_moe_hparams moe_hparams_from_config(nlohmann::json const& cfg) {
  qwen3_moe_hparams hp;
  static_cast<qwen3_hparams&>(hp) = hparams_from_config(cfg);
  auto need = [&](char const* k) {
    if (!cfg.contains(k) || !cfg.at(k).is_number_integer())
      throw error("tf: qwen3_moe config.json lacks the integer key {}", k);
    return model::config_int(cfg.at(k), k);
  };
  // transformers 5 writes num_local_experts; older configs num_experts.
  hp.num_experts = need(cfg.contains("num_local_experts") ? "num_local_experts" : "num_experts");
  hp.num_experts_per_tok = need("num_experts_per_tok");
  hp.moe_intermediate_size = need("moe_intermediate_size");
  hp.decoder_sparse_step =
      cfg.contains("decoder_sparse_step")
          ? model::config_int(cfg.at("decoder_sparse_step"), "decoder_sparse_step")
          : 1;
  hp.norm_topk_prob = cfg.value("norm_topk_prob", true);
  if (cfg.contains("mlp_only_layers") && cfg.at("mlp_only_layers").is_array())
    hp.mlp_only_layers = cfg.at("mlp_only_layers").get<std::vector<int>>();
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline qwen3_moe_hparams read_moe_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return moe_hparams_from_gguf(*g);
  return moe_hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::qwen
