#pragma once
/// Qwen3 hyper-parameters read from GGUF metadata or an HF config.json.
#include <families/qwen/qwen3_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tf::families::qwen {

/// Reads `qwen3.*` keys from a GGUF file (anything with get_int/get_float/get_string, e.g.
/// tf::model::gguf_file); vocab comes from token_embd, tying from whether output.weight exists.
/// Throws tf::error on a missing key.
/// `want_arch` is the architecture (and key prefix) expected: "qwen3", or "qwen3moe" for the MoE.
template <class Gguf>
qwen3_hparams hparams_from_gguf(Gguf const& g, std::string_view want_arch = "qwen3") {
  qwen3_hparams hp;
  std::string const arch(g.architecture());
  if (arch != want_arch)
    throw error("tf: expected a {} GGUF, general.architecture is '{}'", want_arch, arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: qwen3 GGUF lacks the metadata key {}", key(k));
    return static_cast<int>(*v);
  };
  hp.hidden_size = need_int("embedding_length");
  hp.num_layers = need_int("block_count");
  hp.intermediate_size = need_int("feed_forward_length");
  hp.num_heads = need_int("attention.head_count");
  if (hp.num_heads <= 0) throw error("tf: qwen3 GGUF has {} attention heads", hp.num_heads);
  hp.num_kv_heads =
      static_cast<int>(g.get_int(key("attention.head_count_kv")).value_or(hp.num_heads));
  hp.head_dim = static_cast<int>(
      g.get_int(key("attention.key_length")).value_or(hp.hidden_size / hp.num_heads));
  hp.context_length = static_cast<int>(g.get_int(key("context_length")).value_or(40960));
  hp.rms_norm_eps =
      static_cast<float>(g.get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-6));
  hp.rope_theta = static_cast<float>(g.get_float(key("rope.freq_base")).value_or(1e6));
  auto scaling = g.get_string(key("rope.scaling.type"));
  if (scaling && *scaling != "none" && *scaling != "linear")
    throw error("tf: qwen3 GGUF rope.scaling.type {} is not supported", *scaling);
  if (scaling && *scaling == "linear")
    hp.rope_scaling_factor =
        static_cast<float>(g.get_float(key("rope.scaling.factor")).value_or(1.0));
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: qwen3 GGUF lacks a 2-D token_embd.weight");
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  hp.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  return hp;
}

/// Reads an HF Qwen3 config.json (v5 rope_parameters or the legacy rope_theta/rope_scaling).
inline qwen3_hparams hparams_from_config(nlohmann::json const& cfg) {
  qwen3_hparams hp;
  auto need = [&](char const* k) -> nlohmann::json const& {
    if (!cfg.contains(k) || !cfg.at(k).is_number())
      throw error("tf: qwen3 config.json lacks the numeric key {}", k);
    return cfg.at(k);
  };
  auto opt = [&](char const* k, double d) {
    return cfg.contains(k) && cfg.at(k).is_number() ? cfg.at(k).get<double>() : d;
  };
  hp.vocab_size = model::config_int(need("vocab_size"), "vocab_size");
  hp.hidden_size = model::config_int(need("hidden_size"), "hidden_size");
  hp.intermediate_size = model::config_int(need("intermediate_size"), "intermediate_size");
  hp.num_layers = model::config_int(need("num_hidden_layers"), "num_hidden_layers");
  hp.num_heads = model::config_int(need("num_attention_heads"), "num_attention_heads");
  if (hp.num_heads <= 0) throw error("tf: qwen3 config.json has {} attention heads", hp.num_heads);
  hp.num_kv_heads = model::config_int(opt("num_key_value_heads", hp.num_heads));
  hp.head_dim = model::config_int(opt("head_dim", hp.hidden_size / hp.num_heads));
  hp.rms_norm_eps = static_cast<float>(opt("rms_norm_eps", 1e-6));
  hp.context_length = model::config_int(opt("max_position_embeddings", 40960));
  hp.tie_word_embeddings =
      cfg.contains("tie_word_embeddings") && cfg.at("tie_word_embeddings").is_boolean()
          ? cfg.at("tie_word_embeddings").get<bool>()
          : false;
  if (cfg.contains("use_sliding_window") && cfg.at("use_sliding_window").is_boolean() &&
      cfg.at("use_sliding_window").get<bool>())
    throw error("tf: qwen3 config.json sets use_sliding_window, which is not supported");
  // v5 keeps theta and scaling in rope_parameters; older configs use rope_theta + rope_scaling.
  nlohmann::json const* rp = nullptr;
  if (cfg.contains("rope_parameters") && cfg.at("rope_parameters").is_object())
    rp = &cfg.at("rope_parameters");
  else if (cfg.contains("rope_scaling") && cfg.at("rope_scaling").is_object())
    rp = &cfg.at("rope_scaling");
  hp.rope_theta = static_cast<float>(opt("rope_theta", 1e4));
  if (rp) {
    auto type = rp->contains("rope_type") ? rp->at("rope_type")
                                          : rp->value("type", nlohmann::json("default"));
    if (type != "default" && type != "linear")
      throw error("tf: qwen3 rope_type {} is not supported (default, linear)", type.dump());
    if (rp->contains("rope_theta")) hp.rope_theta = rp->at("rope_theta").get<float>();
    if (type == "linear" && rp->contains("factor"))
      hp.rope_scaling_factor = rp->at("factor").get<float>();
  }
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline qwen3_hparams read_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return hparams_from_gguf(*g);
  return hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::qwen
