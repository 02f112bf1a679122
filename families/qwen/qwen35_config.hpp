#pragma once
/// Qwen3.5 hyper-parameters read from GGUF metadata (qwen35, qwen35moe) or an HF config.json
/// (qwen3_5_text, qwen3_5_moe_text, or the multimodal qwen3_5 / qwen3_5_moe with a text_config).
#include <families/qwen/qwen35_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tf::families::qwen {

/// Throws tf::error when `hp` cannot describe a model the forward runs.
inline void check_qwen35_hparams(qwen35_hparams const& hp) {
  int const nk = hp.linear_num_key_heads, nv = hp.linear_num_value_heads;
  bool const ok =
      hp.vocab_size > 0 && hp.hidden_size > 0 && hp.num_layers > 0 && hp.num_heads > 0 &&
      hp.num_kv_heads > 0 && hp.num_heads % hp.num_kv_heads == 0 && hp.head_dim > 0 &&
      hp.rotary_dims > 0 && hp.rotary_dims % 2 == 0 && hp.rotary_dims <= hp.head_dim && nk > 0 &&
      nv > 0 && nv % nk == 0 && hp.linear_key_head_dim > 0 && hp.linear_key_head_dim <= 256 &&
      hp.linear_value_head_dim > 0 && hp.linear_value_head_dim <= 256 &&
      hp.linear_conv_kernel_dim >= 1 && hp.linear_conv_kernel_dim <= 16 &&
      hp.layer_types.size() == static_cast<std::size_t>(hp.num_layers) &&
      (hp.is_moe() ? hp.num_experts_per_tok > 0 && hp.num_experts_per_tok <= hp.num_experts &&
                         hp.moe_intermediate_size > 0 && hp.shared_expert_intermediate_size > 0
                   : hp.intermediate_size > 0);
  if (!ok)
    throw error(
        "tf: qwen35 hparams are inconsistent: hidden {} layers {} ({} layer types) heads {}/{} x "
        "{} "
        "rotary {} vocab {} ffn {}; linear attention k-heads {} x {}, v-heads {} x {}, conv {}; "
        "experts {} top-{} ffn {} shared {}",
        hp.hidden_size, hp.num_layers, hp.layer_types.size(), hp.num_heads, hp.num_kv_heads,
        hp.head_dim, hp.rotary_dims, hp.vocab_size, hp.intermediate_size, nk,
        hp.linear_key_head_dim, nv, hp.linear_value_head_dim, hp.linear_conv_kernel_dim,
        hp.num_experts, hp.num_experts_per_tok, hp.moe_intermediate_size,
        hp.shared_expert_intermediate_size);
}

/// Reads `qwen35.*` or `qwen35moe.*` keys; vocab comes from token_embd, tying from whether
/// output.weight exists, MTP blocks (nextn_predict_layers) are left out. With
/// attention.recurrent_layers a layer is linear iff it has blk.N.ssm_a, else every
/// full_attention_interval-th (default 4) attends. Throws tf::error naming a missing key.
template <class Gguf>
qwen35_hparams qwen35_hparams_from_gguf(Gguf const& g) {
  std::string const arch(g.architecture());
  if (arch != "qwen35" && arch != "qwen35moe")
    throw error("tf: expected a qwen35 or qwen35moe GGUF, general.architecture is '{}'", arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: {} GGUF lacks the metadata key {}", arch, key(k));
    return static_cast<int>(*v);
  };
  auto opt_int = [&](char const* k, int d) {
    return static_cast<int>(g.get_int(key(k)).value_or(d));
  };
  qwen35_hparams hp;
  hp.hidden_size = need_int("embedding_length");
  hp.num_layers = need_int("block_count") - opt_int("nextn_predict_layers", 0);
  hp.num_heads = need_int("attention.head_count");
  if (hp.num_heads <= 0) throw error("tf: {} GGUF has {} attention heads", arch, hp.num_heads);
  hp.num_kv_heads = opt_int("attention.head_count_kv", hp.num_heads);
  hp.head_dim = opt_int("attention.key_length", hp.hidden_size / hp.num_heads);
  hp.context_length = opt_int("context_length", hp.context_length);
  auto eps = g.get_float(key("attention.layer_norm_rms_epsilon"));
  if (!eps)
    throw error("tf: {} GGUF lacks the metadata key {}", arch,
                key("attention.layer_norm_rms_epsilon"));
  hp.rms_norm_eps = static_cast<float>(*eps);
  hp.rotary_dims = need_int("rope.dimension_count");
  hp.rope_theta = static_cast<float>(g.get_float(key("rope.freq_base")).value_or(10000.0));
  auto const sections = g.get_int_array(key("rope.dimension_sections"));
  if (sections.empty() || sections.size() > 4)
    throw error("tf: {} GGUF lacks the metadata key {} (1 to 4 MRoPE sections)", arch,
                key("rope.dimension_sections"));
  hp.mrope_sections = {0, 0, 0, 0};
  for (std::size_t i = 0; i < sections.size(); ++i)
    hp.mrope_sections[i] = static_cast<int>(sections[i]);
  if (auto s = g.get_string(key("rope.scaling.type")); s && *s != "none")
    throw error("tf: {} GGUF rope.scaling.type {} is not supported", arch, *s);

  hp.linear_conv_kernel_dim = need_int("ssm.conv_kernel");
  hp.linear_key_head_dim = need_int("ssm.state_size");
  hp.linear_num_key_heads = need_int("ssm.group_count");
  hp.linear_num_value_heads = need_int("ssm.time_step_rank");
  int const inner = need_int("ssm.inner_size");
  if (hp.linear_num_value_heads <= 0 || inner % hp.linear_num_value_heads != 0)
    throw error("tf: {} GGUF ssm.inner_size {} is not a multiple of ssm.time_step_rank {}", arch,
                inner, hp.linear_num_value_heads);
  hp.linear_value_head_dim = inner / hp.linear_num_value_heads;
  hp.tiled_v_heads = true;

  if (g.has(key("attention.recurrent_layers"))) {
    for (int i = 0; i < hp.num_layers; ++i)
      hp.layer_types.push_back(g.find_tensor("blk." + std::to_string(i) + ".ssm_a")
                                   ? qwen35_layer::linear_attention
                                   : qwen35_layer::full_attention);
  } else {
    hp.layer_types = qwen35_interval_layers(hp.num_layers, opt_int("full_attention_interval", 4));
  }

  if (arch == "qwen35moe") {
    hp.num_experts = need_int("expert_count");
    hp.num_experts_per_tok = need_int("expert_used_count");
    hp.intermediate_size = opt_int("feed_forward_length", 0);
    hp.moe_intermediate_size =
        opt_int("expert_feed_forward_length",
                hp.num_experts_per_tok > 0 ? hp.intermediate_size / hp.num_experts_per_tok : 0);
    hp.shared_expert_intermediate_size =
        opt_int("expert_shared_feed_forward_length", hp.intermediate_size);
  } else {
    hp.intermediate_size = need_int("feed_forward_length");
  }
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: {} GGUF lacks a 2-D token_embd.weight", arch);
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  hp.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  return hp;
}

/// Reads an HF config.json: the text model's keys, from `text_config` when the file is a
/// multimodal wrapper's. Rope from rope_parameters (transformers 5) or rope_theta /
/// partial_rotary_factor / rope_scaling; layers from layer_types or full_attention_interval.
inline qwen35_hparams qwen35_hparams_from_config(nlohmann::json const& cfg) {
  std::string const type = cfg.value("model_type", std::string());
  bool const moe = type == "qwen3_5_moe" || type == "qwen3_5_moe_text";
  if (!moe && type != "qwen3_5" && type != "qwen3_5_text")
    throw error("tf: expected a qwen3_5 or qwen3_5_moe config.json, model_type is '{}'", type);
  bool const wrapped = cfg.contains("text_config") && cfg.at("text_config").is_object();
  nlohmann::json const& t = wrapped ? cfg.at("text_config") : cfg;
  auto need = [&](char const* k) {
    if (!t.contains(k) || !t.at(k).is_number_integer())
      throw error("tf: {} config.json lacks the integer key {}{}", type,
                  wrapped ? "text_config." : "", k);
    return model::config_int(t.at(k), k);
  };
  auto opt = [&](nlohmann::json const& j, char const* k, double d) {
    return j.contains(k) && j.at(k).is_number() ? j.at(k).get<double>() : d;
  };
  qwen35_hparams hp;
  hp.vocab_size = need("vocab_size");
  hp.hidden_size = need("hidden_size");
  hp.num_layers = need("num_hidden_layers");
  hp.num_heads = need("num_attention_heads");
  hp.num_kv_heads = model::config_int(opt(t, "num_key_value_heads", hp.num_heads));
  hp.head_dim = model::config_int(opt(t, "head_dim", 256));
  hp.rms_norm_eps = static_cast<float>(opt(t, "rms_norm_eps", 1e-6));
  hp.context_length = model::config_int(opt(t, "max_position_embeddings", 32768));
  auto tie = [](nlohmann::json const& j) {
    return j.contains("tie_word_embeddings") && j.at("tie_word_embeddings").is_boolean()
               ? std::optional<bool>(j.at("tie_word_embeddings").get<bool>())
               : std::nullopt;
  };
  hp.tie_word_embeddings = tie(cfg).value_or(tie(t).value_or(false));
  hp.linear_num_key_heads = need("linear_num_key_heads");
  hp.linear_num_value_heads = need("linear_num_value_heads");
  hp.linear_key_head_dim = need("linear_key_head_dim");
  hp.linear_value_head_dim = need("linear_value_head_dim");
  hp.linear_conv_kernel_dim = model::config_int(opt(t, "linear_conv_kernel_dim", 4));
  if (moe) {
    hp.num_experts = need("num_experts");
    hp.num_experts_per_tok = need("num_experts_per_tok");
    hp.moe_intermediate_size = need("moe_intermediate_size");
    hp.shared_expert_intermediate_size = need("shared_expert_intermediate_size");
    hp.intermediate_size = model::config_int(opt(t, "intermediate_size", 0));
  } else {
    hp.intermediate_size = need("intermediate_size");
  }

  if (t.contains("layer_types") && t.at("layer_types").is_array()) {
    for (auto const& l : t.at("layer_types")) {
      auto const s = l.is_string() ? l.get<std::string>() : l.dump();
      if (s != "linear_attention" && s != "full_attention")
        throw error(
            "tf: {} config.json layer type {} is neither linear_attention nor "
            "full_attention",
            type, s);
      hp.layer_types.push_back(s == "full_attention" ? qwen35_layer::full_attention
                                                     : qwen35_layer::linear_attention);
    }
    if (hp.layer_types.size() != static_cast<std::size_t>(hp.num_layers))
      throw error("tf: {} config.json has {} layer_types for {} layers", type,
                  hp.layer_types.size(), hp.num_layers);
  } else {
    hp.layer_types = qwen35_interval_layers(
        hp.num_layers, model::config_int(opt(t, "full_attention_interval", 4)));
  }

  // transformers 5 keeps theta, the rotary fraction and the MRoPE sections in rope_parameters.
  nlohmann::json const* rp = nullptr;
  if (t.contains("rope_parameters") && t.at("rope_parameters").is_object())
    rp = &t.at("rope_parameters");
  else if (t.contains("rope_scaling") && t.at("rope_scaling").is_object())
    rp = &t.at("rope_scaling");
  double theta = opt(t, "rope_theta", 10000.0), fraction = opt(t, "partial_rotary_factor", 0.25);
  if (rp) {
    auto const kind = rp->contains("rope_type") ? rp->at("rope_type")
                                                : rp->value("type", nlohmann::json("default"));
    if (kind != "default")
      throw error("tf: {} rope_type {} is not supported (default)", type, kind.dump());
    theta = opt(*rp, "rope_theta", theta);
    fraction = opt(*rp, "partial_rotary_factor", fraction);
    if (rp->contains("mrope_section") && rp->at("mrope_section").is_array()) {
      hp.mrope_sections = {0, 0, 0, 0};
      auto const& s = rp->at("mrope_section");
      for (std::size_t i = 0; i < s.size() && i < 4; ++i)
        hp.mrope_sections[i] = model::config_int(s[i]);
    }
  }
  hp.rope_theta = static_cast<float>(theta);
  hp.rotary_dims = static_cast<int>(hp.head_dim * fraction);
  hp.tiled_v_heads = false;
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline qwen35_hparams read_qwen35_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return qwen35_hparams_from_gguf(*g);
  return qwen35_hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::qwen
