#pragma once
/// Gemma 3 hyper-parameters read from GGUF metadata or an HF config.json.
#include <families/gemma/gemma3_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>

#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace tf::families::gemma {

/// Reads `gemma3.*` keys from a GGUF file (anything with get_int/get_float/get_string, e.g.
/// tf::model::gguf_file); vocab comes from token_embd. Throws tf::error on a missing key.
template <class Gguf>
gemma3_hparams hparams_from_gguf(Gguf const& g) {
  gemma3_hparams hp;
  std::string const arch(g.architecture());
  if (arch != "gemma3" && arch != "gemma3_text")
    throw error("tf: expected a gemma3 GGUF, general.architecture is '{}'", arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: gemma3 GGUF lacks the metadata key {}", key(k));
    return static_cast<int>(*v);
  };
  auto opt_float = [&](char const* k, double d) {
    return static_cast<float>(g.get_float(key(k)).value_or(d));
  };
  hp.hidden_size = need_int("embedding_length");
  hp.num_layers = need_int("block_count");
  hp.intermediate_size = need_int("feed_forward_length");
  hp.num_heads = need_int("attention.head_count");
  hp.num_kv_heads =
      static_cast<int>(g.get_int(key("attention.head_count_kv")).value_or(hp.num_heads));
  if (hp.num_heads <= 0) throw error("tf: gemma3 GGUF has {} attention heads", hp.num_heads);
  hp.head_dim = static_cast<int>(
      g.get_int(key("attention.key_length")).value_or(hp.hidden_size / hp.num_heads));
  hp.context_length = static_cast<int>(g.get_int(key("context_length")).value_or(8192));
  hp.rms_norm_eps = opt_float("attention.layer_norm_rms_epsilon", 1e-6);
  hp.rope_theta_global = opt_float("rope.freq_base", 1e6);
  auto swa_base = g.get_float(key("rope.freq_base_swa"));
  if (!swa_base) swa_base = g.get_float(key("rope.local.freq_base"));
  hp.rope_theta_local = static_cast<float>(swa_base.value_or(1e4));
  auto scaling = g.get_string(key("rope.scaling.type"));
  hp.rope_scaling_factor =
      scaling && *scaling == "linear" ? opt_float("rope.scaling.factor", 1.0) : 1.0f;
  hp.sliding_window = static_cast<int>(g.get_int(key("attention.sliding_window")).value_or(0));
  hp.sliding_window_pattern =
      static_cast<int>(g.get_int(key("attention.sliding_window_pattern")).value_or(6));
  hp.final_logit_softcap = opt_float("final_logit_softcapping", 0.0);
  // llama.cpp scales q by 1/sqrt(key_length), except the 62-layer 27B: 1/sqrt(hidden / heads).
  hp.query_pre_attn_scalar = hp.num_layers == 62 ? static_cast<float>(hp.hidden_size / hp.num_heads)
                                                 : static_cast<float>(hp.head_dim);
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: gemma3 GGUF lacks a 2-D token_embd.weight");
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  return hp;
}

/// Reads an HF Gemma 3 config.json (v5 rope_parameters or the legacy rope keys).
inline gemma3_hparams hparams_from_config(nlohmann::json const& c) {
  auto const& cfg = c.contains("text_config") ? c.at("text_config") : c;
  gemma3_hparams hp;
  auto need = [&](char const* k) -> nlohmann::json const& {
    if (!cfg.contains(k) || cfg.at(k).is_null())
      throw error("tf: gemma3 config.json lacks the key {}", k);
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
  hp.num_kv_heads = model::config_int(opt("num_key_value_heads", hp.num_heads));
  hp.head_dim = model::config_int(opt("head_dim", 256));
  hp.query_pre_attn_scalar = static_cast<float>(opt("query_pre_attn_scalar", hp.head_dim));
  hp.rms_norm_eps = static_cast<float>(opt("rms_norm_eps", 1e-6));
  hp.context_length = model::config_int(opt("max_position_embeddings", 32768));
  hp.sliding_window = model::config_int(opt("sliding_window", 0));
  hp.final_logit_softcap = static_cast<float>(opt("final_logit_softcapping", 0.0));
  if (cfg.contains("layer_types") && cfg.at("layer_types").is_array()) {
    // tf's pattern is a period; check the listed layers follow one.
    auto const& lt = cfg.at("layer_types");
    int period = 0;
    for (std::size_t i = 0; i < lt.size(); ++i)
      if (lt[i].get<std::string>() == "full_attention") {
        period = static_cast<int>(i) + 1;
        break;
      }
    if (period == 0) period = hp.num_layers + 1;
    for (std::size_t i = 0; i < lt.size(); ++i) {
      bool const full = lt[i].get<std::string>() == "full_attention";
      if (full != ((static_cast<int>(i) + 1) % period == 0))
        throw error("tf: gemma3 layer_types[{}] = {} does not follow a period of {}", i,
                    lt[i].get<std::string>(), period);
    }
    hp.sliding_window_pattern = period;
  } else {
    hp.sliding_window_pattern =
        model::config_int(opt("sliding_window_pattern", opt("_sliding_window_pattern", 6)));
  }
  if (cfg.contains("rope_parameters") && cfg.at("rope_parameters").is_object()) {
    auto const& rp = cfg.at("rope_parameters");
    auto theta = [&](char const* kind, double d) {
      if (!rp.contains(kind)) return d;
      auto const& p = rp.at(kind);
      if (p.contains("rope_type") && p.at("rope_type") != "default" &&
          p.at("rope_type") != "linear")
        throw error("tf: gemma3 rope_type {} for {} is not supported (default, linear)",
                    p.at("rope_type").dump(), kind);
      return p.contains("rope_theta") ? p.at("rope_theta").get<double>() : d;
    };
    hp.rope_theta_global = static_cast<float>(theta("full_attention", 1e6));
    hp.rope_theta_local = static_cast<float>(theta("sliding_attention", 1e4));
    if (rp.contains("full_attention") && rp.at("full_attention").contains("factor"))
      hp.rope_scaling_factor = rp.at("full_attention").at("factor").get<float>();
  } else {
    hp.rope_theta_global = static_cast<float>(opt("rope_theta", 1e6));
    hp.rope_theta_local = static_cast<float>(opt("rope_local_base_freq", 1e4));
    if (cfg.contains("rope_scaling") && cfg.at("rope_scaling").is_object() &&
        cfg.at("rope_scaling").contains("factor"))
      hp.rope_scaling_factor = cfg.at("rope_scaling").at("factor").get<float>();
  }
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline gemma3_hparams read_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return hparams_from_gguf(*g);
  return hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::gemma
