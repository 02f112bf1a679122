#pragma once
/// Gemma 4 hyper-parameters read from GGUF metadata or an HF config.json (gemma4_text, or the
/// gemma4 multimodal wrapper's text_config), with transformers' defaults for the keys a saved
/// config leaves out.
#include <families/common/gguf_layer_values.hpp>
#include <families/gemma/gemma4_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <kernels/cpu/dequant.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace tf::families::gemma {

inline gemma4_hparams gemma4_hparams_from_config(nlohmann::json const& c) {
  auto const& cfg = c.contains("text_config") ? c.at("text_config") : c;
  gemma4_hparams hp;
  auto has = [&](char const* k) { return cfg.contains(k) && !cfg.at(k).is_null(); };
  auto num = [&](char const* k, double d) { return has(k) ? cfg.at(k).get<double>() : d; };
  auto integer = [&](char const* k, int d) { return has(k) ? model::config_int(cfg.at(k), k) : d; };
  auto flag = [&](char const* k) { return has(k) && cfg.at(k).get<bool>(); };
  hp.vocab_size = integer("vocab_size", hp.vocab_size);
  hp.hidden_size = integer("hidden_size", hp.hidden_size);
  hp.intermediate_size = integer("intermediate_size", hp.intermediate_size);
  hp.num_layers = integer("num_hidden_layers", hp.num_layers);
  hp.num_heads = integer("num_attention_heads", hp.num_heads);
  hp.num_kv_heads = integer("num_key_value_heads", hp.num_kv_heads);
  hp.head_dim = integer("head_dim", hp.head_dim);
  hp.global_head_dim = integer("global_head_dim", hp.global_head_dim);
  hp.k_eq_v = flag("attention_k_eq_v");
  // transformers gives full layers num_global_key_value_heads only with k_eq_v.
  hp.num_global_kv_heads =
      hp.k_eq_v ? integer("num_global_key_value_heads", hp.num_kv_heads) : hp.num_kv_heads;
  hp.sliding_window = integer("sliding_window", hp.sliding_window);
  hp.num_kv_shared_layers = integer("num_kv_shared_layers", 0);
  hp.double_wide_mlp = flag("use_double_wide_mlp");
  hp.ple_dim = integer("hidden_size_per_layer_input", 256);
  hp.ple_vocab = integer("vocab_size_per_layer_input", 262144);
  hp.moe = flag("enable_moe_block");
  hp.num_experts = integer("num_experts", 0);
  hp.top_k_experts = integer("top_k_experts", 0);
  hp.moe_intermediate_size = integer("moe_intermediate_size", 0);
  hp.rms_norm_eps = static_cast<float>(num("rms_norm_eps", 1e-6));
  hp.final_logit_softcap = static_cast<float>(num("final_logit_softcapping", 0.0));
  hp.context_length = integer("max_position_embeddings", hp.context_length);
  if (has("use_bidirectional_attention"))
    throw error("tf: gemma4 with use_bidirectional_attention is not a causal language model");
  hp.sliding.assign(static_cast<std::size_t>(hp.num_layers), 1);
  if (has("layer_types")) {
    auto const& lt = cfg.at("layer_types");
    if (!lt.is_array() || lt.size() != static_cast<std::size_t>(hp.num_layers))
      throw error("tf: gemma4 layer_types lists {} layers of {}", lt.size(), hp.num_layers);
    for (std::size_t i = 0; i < lt.size(); ++i) {
      auto const t = lt[i].get<std::string>();
      if (t != "sliding_attention" && t != "full_attention")
        throw error("tf: gemma4 layer_types[{}] is '{}'", i, t);
      hp.sliding[i] = t == "sliding_attention";
    }
  } else {
    for (int i = 0; i < hp.num_layers; ++i) hp.sliding[static_cast<std::size_t>(i)] = (i + 1) % 6;
  }
  if (hp.num_layers > 0) hp.sliding.back() = 0;  // transformers forces the last layer full
  if (has("rope_parameters")) {
    auto const& rp = cfg.at("rope_parameters");
    if (rp.contains("sliding_attention")) {
      auto const& p = rp.at("sliding_attention");
      if (p.value("rope_type", std::string("default")) != "default")
        throw error("tf: gemma4 sliding rope_type {} (tf reads default)", p.at("rope_type").dump());
      hp.rope_theta_local = p.value("rope_theta", 1e4f);
    }
    if (rp.contains("full_attention")) {
      auto const& p = rp.at("full_attention");
      auto const type = p.value("rope_type", std::string("default"));
      if (type != "default" && type != "proportional")
        throw error("tf: gemma4 full rope_type '{}' (tf reads proportional, default)", type);
      hp.rope_theta_global = p.value("rope_theta", 1e6f);
      hp.partial_rotary_factor =
          type == "proportional" ? p.value("partial_rotary_factor", 1.0f) : 1.0f;
      hp.rope_scaling_factor = type == "proportional" ? p.value("factor", 1.0f) : 1.0f;
    }
  }
  // A config saved by transformers lists the full layers' own shapes per layer instead.
  if (has("per_layer_config")) {
    bool first = true;
    for (auto const& [key, over] : cfg.at("per_layer_config").items()) {
      int const l = std::stoi(key);
      if (l < 0 || l >= hp.num_layers || hp.is_sliding(l))
        throw error("tf: gemma4 per_layer_config names layer {}, not a full-attention layer", key);
      int const hd = over.value("head_dim", hp.head_dim);
      int const kvh = over.value("num_key_value_heads", hp.num_kv_heads);
      if (!first && (hd != hp.global_head_dim || kvh != hp.num_global_kv_heads))
        throw error("tf: gemma4 full layers of different shapes ({} x {} and {} x {})", kvh, hd,
                    hp.num_global_kv_heads, hp.global_head_dim);
      hp.global_head_dim = hd;
      hp.num_global_kv_heads = kvh;
      first = false;
    }
  }
  return hp;
}

/// The share of a full layer's head dim that RoPE turns, from a GGUF's rope_freqs (factors of 1
/// turn; the converter's 1e30 leaves a pair unrotated); 1 where the file has none.
template <class Gguf>
float gemma4_partial_rotary(Gguf const& g, int global_head_dim) {
  auto const* f = g.find_tensor("rope_freqs.weight");
  if (!f) return 1.0f;
  std::vector<float> v(static_cast<std::size_t>(f->elements()));
  kernels::cpu::dequantize_row(f->type, f->data, v.data(), f->elements());
  auto const turning = std::count_if(v.begin(), v.end(), [](float x) { return x < 1e3f; });
  return 2.0f * static_cast<float>(turning) / static_cast<float>(global_head_dim);
}

/// Reads `gemma4.*` keys from a GGUF file as llama.cpp's converter writes them (per-layer arrays
/// for the sliding pattern, KV heads and MLP width; rope_freqs marking the full layers' unrotated
/// pairs; K=V where a full layer has no attn_v). Throws tf::error on a missing key.
template <class Gguf>
gemma4_hparams gemma4_hparams_from_gguf(Gguf const& g) {
  std::string const arch(g.architecture());
  if (arch != "gemma4")
    throw error("tf: expected a gemma4 GGUF, general.architecture is '{}'", arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: gemma4 GGUF lacks the metadata key {}", key(k));
    return static_cast<int>(*v);
  };
  auto opt_int = [&](char const* k, int d) {
    return static_cast<int>(g.get_int(key(k)).value_or(d));
  };
  auto opt_float = [&](char const* k, double d) {
    return static_cast<float>(g.get_float(key(k)).value_or(d));
  };
  auto per_layer = [&](char const* k, int n) {
    auto v = gguf_layer_values(g, key(k), n, "gemma4");
    if (v.size() != static_cast<std::size_t>(n))
      throw error("tf: gemma4 GGUF {} lists {} values for {} layers", key(k), v.size(), n);
    return v;
  };
  gemma4_hparams hp;
  hp.hidden_size = need_int("embedding_length");
  hp.num_layers = need_int("block_count");
  hp.num_heads = need_int("attention.head_count");
  hp.global_head_dim = need_int("attention.key_length");
  hp.head_dim = opt_int("attention.key_length_swa", hp.global_head_dim);
  hp.context_length = opt_int("context_length", hp.context_length);
  hp.rms_norm_eps = opt_float("attention.layer_norm_rms_epsilon", 1e-6);
  hp.rope_theta_global = opt_float("rope.freq_base", 1e6);
  hp.rope_theta_local = opt_float("rope.freq_base_swa", 1e4);
  hp.sliding_window = opt_int("attention.sliding_window", 0);
  hp.final_logit_softcap = opt_float("final_logit_softcapping", 0.0);
  hp.num_kv_shared_layers = opt_int("attention.shared_kv_layers", 0);
  hp.ple_dim = opt_int("embedding_length_per_layer_input", 0);
  auto const swa = g.get_bool_array(key("attention.sliding_window_pattern"));
  if (swa.size() != static_cast<std::size_t>(hp.num_layers))
    throw error("tf: gemma4 GGUF {} lists {} layers of {}", key("attention.sliding_window_pattern"),
                swa.size(), hp.num_layers);
  hp.sliding.assign(swa.begin(), swa.end());
  auto const kv = per_layer("attention.head_count_kv", hp.num_layers);
  auto const ff = per_layer("feed_forward_length", hp.num_layers);
  hp.intermediate_size = static_cast<int>(ff.front());
  int full = -1;
  for (int l = 0; l < hp.num_layers; ++l) {
    auto const i = static_cast<std::size_t>(l);
    (hp.is_sliding(l) ? hp.num_kv_heads : hp.num_global_kv_heads) = static_cast<int>(kv[i]);
    if (!hp.is_sliding(l) && full < 0) full = l;
    if (ff[i] != hp.intermediate_size) hp.double_wide_mlp = true;
    hp.ffn_widths.push_back(static_cast<int>(ff[i]));
  }
  if (hp.num_kv_heads <= 0) hp.num_kv_heads = hp.num_global_kv_heads;
  if (hp.num_global_kv_heads <= 0) hp.num_global_kv_heads = hp.num_kv_heads;
  // The converter writes no v projection for K=V full layers.
  hp.k_eq_v = full >= 0 && full < hp.first_shared_layer() &&
              !g.find_tensor(fmt::format("blk.{}.attn_v.weight", full));
  hp.partial_rotary_factor = gemma4_partial_rotary(g, hp.global_head_dim);
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: gemma4 GGUF lacks a 2-D token_embd.weight");
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  if (hp.ple_dim > 0) {
    auto const* ple = g.find_tensor("per_layer_token_embd.weight");
    if (!ple || ple->dims.size() != 2)
      throw error("tf: gemma4 GGUF lacks a 2-D per_layer_token_embd.weight");
    hp.ple_vocab = static_cast<int>(ple->dims[1]);
  }
  auto const experts = opt_int("expert_count", 0);
  if (experts > 0) {
    hp.moe = true;
    hp.num_experts = experts;
    hp.top_k_experts = opt_int("expert_used_count", 0);
    hp.moe_intermediate_size = opt_int("expert_feed_forward_length", 0);
  }
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline gemma4_hparams read_gemma4_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return gemma4_hparams_from_gguf(*g);
  return gemma4_hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::gemma
