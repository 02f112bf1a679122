#pragma once
/// Qwen3-Next hyper-parameters read from GGUF metadata (qwen3next) or an HF config.json
/// (qwen3_next), into qwen35_hparams: the keys Qwen3.5 shares are read by qwen35_detail's readers.
#include <families/qwen/qwen35_config.hpp>
#include <families/qwen/qwen35_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tf::families::qwen {

/// Reads `qwen3next.*` keys as llama.cpp's converter writes them: Qwen3.5-MoE's, without MRoPE
/// sections, value heads in HF's grouped order. The top-k weights are always renormalised (as
/// llama.cpp does), and a layer without blk.N.ffn_gate_inp.weight has a dense MLP of
/// feed_forward_length. Throws tf::error naming a missing key.
template <class Gguf>
qwen35_hparams qwen3_next_hparams_from_gguf(Gguf const& g) {
  std::string const arch(g.architecture());
  if (arch != "qwen3next")
    throw error("tf: expected a qwen3next GGUF, general.architecture is '{}'", arch);
  auto hp = qwen35_detail::hybrid_from_gguf(g, arch);
  hp.mrope_sections = {0, 0, 0, 0};
  hp.tiled_v_heads = false;
  qwen35_detail::gguf_experts(g, arch, hp);
  hp.norm_topk_prob = true;
  for (int i = 0; i < hp.num_layers; ++i)
    if (!g.find_tensor("blk." + std::to_string(i) + ".ffn_gate_inp.weight"))
      hp.mlp_only_layers.push_back(i);
  qwen35_detail::gguf_vocab_and_tie(g, arch, hp);
  return hp;
}

/// Reads an HF Qwen3-Next config.json: Qwen3.5's text keys plus the experts (num_experts 0: every
/// layer dense), norm_topk_prob (default true), decoder_sparse_step and mlp_only_layers (layer i
/// routes iff (i + 1) % decoder_sparse_step == 0 and i is not listed); intermediate_size is needed
/// only where some layer is dense.
inline qwen35_hparams qwen3_next_hparams_from_config(nlohmann::json const& cfg) {
  std::string const type = cfg.value("model_type", std::string());
  if (type != "qwen3_next")
    throw error("tf: expected a qwen3_next config.json, model_type is '{}'", type);
  auto hp = qwen35_detail::hybrid_from_config(cfg, type, "");
  hp.mrope_sections = {0, 0, 0, 0};
  auto flag = [&](char const* k, bool d) {
    if (!cfg.contains(k) || cfg.at(k).is_null()) return d;
    if (!cfg.at(k).is_boolean())
      throw error("tf: {} config.json {} is {}, not a boolean", type, k, cfg.at(k).dump());
    return cfg.at(k).get<bool>();
  };
  auto need = [&](char const* k) { return qwen35_detail::config_need(cfg, type, "", k); };
  hp.tie_word_embeddings = flag("tie_word_embeddings", false);
  hp.num_experts = need("num_experts");
  if (hp.num_experts > 0) {
    hp.num_experts_per_tok = need("num_experts_per_tok");
    hp.moe_intermediate_size = need("moe_intermediate_size");
    hp.shared_expert_intermediate_size = need("shared_expert_intermediate_size");
  }
  hp.norm_topk_prob = flag("norm_topk_prob", true);
  hp.decoder_sparse_step = model::config_int(
      qwen35_detail::config_number(cfg, "decoder_sparse_step", 1), "decoder_sparse_step");
  if (hp.decoder_sparse_step < 1)
    throw error("tf: {} config.json decoder_sparse_step is {}, not positive", type,
                hp.decoder_sparse_step);
  if (cfg.contains("mlp_only_layers") && !cfg.at("mlp_only_layers").is_null()) {
    auto const& listed = cfg.at("mlp_only_layers");
    if (!listed.is_array())
      throw error("tf: {} config.json mlp_only_layers is {}, not a list of layers", type,
                  listed.dump());
    for (auto const& i : listed)
      hp.mlp_only_layers.push_back(model::config_int(i, "mlp_only_layers"));
  }
  bool dense = false;
  for (int i = 0; i < hp.num_layers; ++i) dense = dense || !hp.is_moe(i);
  hp.intermediate_size =
      dense ? need("intermediate_size")
            : model::config_int(qwen35_detail::config_number(cfg, "intermediate_size", 0));
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline qwen35_hparams read_qwen3_next_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return qwen3_next_hparams_from_gguf(*g);
  return qwen3_next_hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::qwen
