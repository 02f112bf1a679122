#pragma once
/// Qwen3.5 hyper-parameters read from GGUF metadata (qwen35, qwen35moe) or an HF config.json
/// (qwen3_5_text, qwen3_5_moe_text, or the multimodal qwen3_5 / qwen3_5_moe with a text_config);
/// qwen35_detail holds what qwen3_next_config.hpp reads the same way.
#include <families/qwen/qwen35_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tf::families::qwen {

/// Throws tf::error when `hp` cannot describe a model the forward runs; `family` names it.
inline void check_qwen35_hparams(qwen35_hparams const& hp, char const* family = "qwen35") {
  int const nk = hp.linear_num_key_heads, nv = hp.linear_num_value_heads;
  bool routed = false, dense = false;
  for (int i = 0; i < hp.num_layers; ++i) (hp.is_moe(i) ? routed : dense) = true;
  bool const ok =
      hp.vocab_size > 0 && hp.hidden_size > 0 && hp.num_layers > 0 && hp.num_heads > 0 &&
      hp.num_kv_heads > 0 && hp.num_heads % hp.num_kv_heads == 0 && hp.head_dim > 0 &&
      hp.rotary_dims > 0 && hp.rotary_dims % 2 == 0 && hp.rotary_dims <= hp.head_dim && nk > 0 &&
      nv > 0 && nv % nk == 0 && hp.linear_key_head_dim > 0 && hp.linear_key_head_dim <= 256 &&
      hp.linear_value_head_dim > 0 && hp.linear_value_head_dim <= 256 &&
      hp.linear_conv_kernel_dim >= 1 && hp.linear_conv_kernel_dim <= 16 &&
      hp.layer_types.size() == static_cast<std::size_t>(hp.num_layers) &&
      hp.decoder_sparse_step > 0 &&
      (!routed || (hp.num_experts_per_tok > 0 && hp.num_experts_per_tok <= hp.num_experts &&
                   hp.moe_intermediate_size > 0 && hp.shared_expert_intermediate_size > 0)) &&
      (!dense || hp.intermediate_size > 0);
  if (!ok)
    throw error(
        "tf: {} hparams are inconsistent: hidden {} layers {} ({} layer types) heads {}/{} x "
        "{} "
        "rotary {} vocab {} ffn {}; linear attention k-heads {} x {}, v-heads {} x {}, conv {}; "
        "experts {} top-{} ffn {} shared {} sparse step {}",
        family, hp.hidden_size, hp.num_layers, hp.layer_types.size(), hp.num_heads, hp.num_kv_heads,
        hp.head_dim, hp.rotary_dims, hp.vocab_size, hp.intermediate_size, nk,
        hp.linear_key_head_dim, nv, hp.linear_value_head_dim, hp.linear_conv_kernel_dim,
        hp.num_experts, hp.num_experts_per_tok, hp.moe_intermediate_size,
        hp.shared_expert_intermediate_size, hp.decoder_sparse_step);
}

namespace qwen35_detail {

/// `arch`.`k` as an int; throws tf::error naming the key when the file lacks it.
template <class Gguf>
int gguf_int(Gguf const& g, std::string const& arch, char const* k) {
  auto v = g.get_int(arch + "." + k);
  if (!v) throw error("tf: {} GGUF lacks the metadata key {}.{}", arch, arch, k);
  return static_cast<int>(*v);
}

template <class Gguf>
int gguf_int_or(Gguf const& g, std::string const& arch, char const* k, int d) {
  return static_cast<int>(g.get_int(arch + "." + k).value_or(d));
}

/// The keys the qwen35, qwen35moe and qwen3next GGUFs share: sizes, attention, RoPE (the MRoPE
/// sections aside), the GDN keys and which layers attend. The caller adds the MLP's keys, then
/// gguf_vocab_and_tie.
template <class Gguf>
qwen35_hparams hybrid_from_gguf(Gguf const& g, std::string const& arch) {
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) { return gguf_int(g, arch, k); };
  auto opt_int = [&](char const* k, int d) { return gguf_int_or(g, arch, k, d); };
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

  if (g.has(key("attention.recurrent_layers"))) {
    for (int i = 0; i < hp.num_layers; ++i)
      hp.layer_types.push_back(g.find_tensor("blk." + std::to_string(i) + ".ssm_a")
                                   ? qwen35_layer::linear_attention
                                   : qwen35_layer::full_attention);
  } else {
    hp.layer_types = qwen35_interval_layers(hp.num_layers, opt_int("full_attention_interval", 4));
  }
  return hp;
}

/// The routed MLP's keys of a qwen35moe or qwen3next GGUF.
template <class Gguf>
void gguf_experts(Gguf const& g, std::string const& arch, qwen35_hparams& hp) {
  hp.num_experts = gguf_int(g, arch, "expert_count");
  hp.num_experts_per_tok = gguf_int(g, arch, "expert_used_count");
  hp.intermediate_size = gguf_int_or(g, arch, "feed_forward_length", 0);
  hp.moe_intermediate_size =
      gguf_int_or(g, arch, "expert_feed_forward_length",
                  hp.num_experts_per_tok > 0 ? hp.intermediate_size / hp.num_experts_per_tok : 0);
  hp.shared_expert_intermediate_size =
      gguf_int_or(g, arch, "expert_shared_feed_forward_length", hp.intermediate_size);
}

/// Vocab from token_embd; tied embeddings where the file has no output.weight.
template <class Gguf>
void gguf_vocab_and_tie(Gguf const& g, std::string const& arch, qwen35_hparams& hp) {
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: {} GGUF lacks a 2-D token_embd.weight", arch);
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  hp.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
}

inline double config_number(nlohmann::json const& j, char const* k, double d) {
  return j.contains(k) && j.at(k).is_number() ? j.at(k).get<double>() : d;
}

/// Integer key `k` of `t`; the error names it as `prefix`k.
inline int config_need(nlohmann::json const& t, std::string const& type, char const* prefix,
                       char const* k) {
  if (!t.contains(k) || !t.at(k).is_number_integer())
    throw error("tf: {} config.json lacks the integer key {}{}", type, prefix, k);
  return model::config_int(t.at(k), k);
}

/// What the Qwen3.5 and Qwen3-Next text configs share: sizes, attention, the GDN keys, which
/// layers attend (layer_types or full_attention_interval) and RoPE (rope_parameters of
/// transformers 5, or rope_theta / partial_rotary_factor / rope_scaling). The caller adds tying
/// and the MLP's keys. `prefix` is where `t` sits in the file ("text_config." or "").
inline qwen35_hparams hybrid_from_config(nlohmann::json const& t, std::string const& type,
                                         char const* prefix) {
  auto need = [&](char const* k) { return config_need(t, type, prefix, k); };
  auto opt = [](nlohmann::json const& j, char const* k, double d) {
    return config_number(j, k, d);
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
  hp.linear_num_key_heads = need("linear_num_key_heads");
  hp.linear_num_value_heads = need("linear_num_value_heads");
  hp.linear_key_head_dim = need("linear_key_head_dim");
  hp.linear_value_head_dim = need("linear_value_head_dim");
  hp.linear_conv_kernel_dim = model::config_int(opt(t, "linear_conv_kernel_dim", 4));

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

}  // namespace qwen35_detail

/// Reads `qwen35.*` or `qwen35moe.*` keys; vocab comes from token_embd, tying from whether
/// output.weight exists, MTP blocks (nextn_predict_layers) are left out. With
/// attention.recurrent_layers a layer is linear iff it has blk.N.ssm_a, else every
/// full_attention_interval-th (default 4) attends. Throws tf::error naming a missing key.
template <class Gguf>
qwen35_hparams qwen35_hparams_from_gguf(Gguf const& g) {
  std::string const arch(g.architecture());
  if (arch != "qwen35" && arch != "qwen35moe")
    throw error("tf: expected a qwen35 or qwen35moe GGUF, general.architecture is '{}'", arch);
  auto hp = qwen35_detail::hybrid_from_gguf(g, arch);
  auto const key = arch + ".rope.dimension_sections";
  auto const sections = g.get_int_array(key);
  if (sections.empty() || sections.size() > 4)
    throw error("tf: {} GGUF lacks the metadata key {} (1 to 4 MRoPE sections)", arch, key);
  hp.mrope_sections = {0, 0, 0, 0};
  for (std::size_t i = 0; i < sections.size(); ++i)
    hp.mrope_sections[i] = static_cast<int>(sections[i]);
  hp.tiled_v_heads = true;
  if (arch == "qwen35moe")
    qwen35_detail::gguf_experts(g, arch, hp);
  else
    hp.intermediate_size = qwen35_detail::gguf_int(g, arch, "feed_forward_length");
  qwen35_detail::gguf_vocab_and_tie(g, arch, hp);
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
  char const* const prefix = wrapped ? "text_config." : "";
  auto hp = qwen35_detail::hybrid_from_config(t, type, prefix);
  auto tie = [](nlohmann::json const& j) {
    return j.contains("tie_word_embeddings") && j.at("tie_word_embeddings").is_boolean()
               ? std::optional<bool>(j.at("tie_word_embeddings").get<bool>())
               : std::nullopt;
  };
  hp.tie_word_embeddings = tie(cfg).value_or(tie(t).value_or(false));
  auto need = [&](char const* k) { return qwen35_detail::config_need(t, type, prefix, k); };
  if (moe) {
    hp.num_experts = need("num_experts");
    hp.num_experts_per_tok = need("num_experts_per_tok");
    hp.moe_intermediate_size = need("moe_intermediate_size");
    hp.shared_expert_intermediate_size = need("shared_expert_intermediate_size");
    hp.intermediate_size =
        model::config_int(qwen35_detail::config_number(t, "intermediate_size", 0));
  } else {
    hp.intermediate_size = need("intermediate_size");
  }
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline qwen35_hparams read_qwen35_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return qwen35_hparams_from_gguf(*g);
  return qwen35_hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::qwen
