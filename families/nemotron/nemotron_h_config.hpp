#pragma once
/// Nemotron-H hyper-parameters read from GGUF metadata (nemotron_h, nemotron_h_moe) or an HF
/// config.json (model_type nemotron_h, dense or MoE).
#include <families/common/gguf_layer_values.hpp>
#include <families/nemotron/nemotron_h_hparams.hpp>
#include <tf/error.hpp>
#include <tf/model/config_int.hpp>
#include <tf/model/model_file.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tf::families::nemotron {

/// Reads `<arch>.*` keys of a nemotron_h or nemotron_h_moe GGUF. The layer kinds follow
/// llama.cpp: a layer with attention.head_count_kv[i] == 0 and feed_forward_length[i] == 0 is
/// Mamba2, one with only feed_forward_length[i] == 0 attends, the others are MoE when the file has
/// experts (expert_count > 0) and relu² MLPs otherwise. Throws tf::error on a missing key.
template <class Gguf>
nemotron_h_hparams hparams_from_gguf(Gguf const& g) {
  std::string const arch(g.architecture());
  if (arch != "nemotron_h" && arch != "nemotron_h_moe")
    throw error("tf: expected a nemotron_h or nemotron_h_moe GGUF, general.architecture is '{}'",
                arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: {} GGUF lacks the metadata key {}", arch, key(k));
    return static_cast<int>(*v);
  };
  auto opt_int = [&](char const* k, int d) {
    return static_cast<int>(g.get_int(key(k)).value_or(d));
  };
  nemotron_h_hparams hp;
  hp.hidden_size = need_int("embedding_length");
  int const n = need_int("block_count") - opt_int("nextn_predict_layers", 0);
  if (n <= 0) throw error("tf: {} GGUF has {} layers", arch, n);
  // A per-layer value: an array of at least n, or one scalar for every layer.
  auto per_layer = [&](char const* k) {
    auto const v = gguf_layer_values(g, key(k), n, arch);
    if (static_cast<int>(v.size()) < n)
      throw error("tf: {} GGUF {} has {} entries for {} layers", arch, key(k), v.size(), n);
    return v;
  };
  auto const heads = per_layer("attention.head_count");
  auto const kv_heads = per_layer("attention.head_count_kv");
  auto const ff = per_layer("feed_forward_length");
  hp.n_routed_experts = opt_int("expert_count", 0);
  for (int i = 0; i < n; ++i) {
    auto const j = static_cast<std::size_t>(i);
    block_kind k = block_kind::mlp;
    if (ff[j] == 0)
      k = kv_heads[j] == 0 ? block_kind::mamba : block_kind::attention;
    else if (hp.n_routed_experts > 0)
      k = block_kind::moe;
    hp.layers.push_back(k);
    auto same = [&](int& into, std::int64_t v, char const* what) {
      if (into != 0 && into != v)
        throw error("tf: {} GGUF layer {} has {} {}, an earlier layer {} (tf wants one value)",
                    arch, i, what, v, into);
      into = static_cast<int>(v);
    };
    if (k == block_kind::attention) {
      same(hp.num_heads, heads[j], "attention heads");
      same(hp.num_kv_heads, kv_heads[j], "KV heads");
    }
    if (k == block_kind::mlp) same(hp.intermediate_size, ff[j], "feed_forward_length");
  }
  if (hp.count(block_kind::attention) > 0) {
    if (hp.num_heads <= 0) throw error("tf: {} GGUF has {} attention heads", arch, hp.num_heads);
    hp.head_dim = opt_int("attention.key_length", hp.hidden_size / hp.num_heads);
    if (int const v = opt_int("attention.value_length", hp.head_dim); v != hp.head_dim)
      throw error("tf: {} GGUF has key_length {} and value_length {}", arch, hp.head_dim, v);
  }
  if (hp.count(block_kind::mamba) > 0) {
    hp.mamba_d_conv = need_int("ssm.conv_kernel");
    hp.ssm_state_size = need_int("ssm.state_size");
    hp.mamba_num_heads = need_int("ssm.time_step_rank");
    hp.mamba_n_groups = need_int("ssm.group_count");
    int const inner = need_int("ssm.inner_size");
    if (hp.mamba_num_heads <= 0 || inner % hp.mamba_num_heads != 0)
      throw error("tf: {} GGUF ssm.inner_size {} is not a multiple of ssm.time_step_rank {}", arch,
                  inner, hp.mamba_num_heads);
    hp.mamba_head_dim = inner / hp.mamba_num_heads;
  }
  if (hp.count(block_kind::moe) > 0) {
    hp.num_experts_per_tok = need_int("expert_used_count");
    hp.moe_intermediate_size = need_int("expert_feed_forward_length");
    hp.moe_shared_expert_intermediate_size = opt_int("expert_shared_feed_forward_length", 0);
    hp.moe_latent_size = opt_int("moe_latent_size", 0);
    hp.n_group = opt_int("expert_group_count", 1);
    hp.topk_group = opt_int("expert_group_used_count", 1);
    hp.norm_topk_prob = g.get_bool(key("expert_weights_norm")).value_or(false);
    hp.routed_scaling_factor =
        static_cast<float>(g.get_float(key("expert_weights_scale")).value_or(1.0));
  }
  hp.layer_norm_epsilon =
      static_cast<float>(g.get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
  hp.context_length = opt_int("context_length", 4096);
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: {} GGUF lacks a 2-D token_embd.weight", arch);
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  return hp;
}

/// The layer kinds of an HF config: `layers_block_type` (or `layer_types`), a list of "mamba" |
/// "attention" | "mlp" | "moe" (transformers 5 also writes "linear_attention" for Mamba2 and
/// "full_attention"), or the legacy `hybrid_override_pattern` of M, *, -, E.
inline std::vector<block_kind> layer_kinds_from_config(nlohmann::json const& c) {
  std::vector<block_kind> out;
  auto add = [&](std::string const& s) {
    if (s == "mamba" || s == "linear_attention" || s == "M")
      out.push_back(block_kind::mamba);
    else if (s == "attention" || s == "full_attention" || s == "*")
      out.push_back(block_kind::attention);
    else if (s == "mlp" || s == "-")
      out.push_back(block_kind::mlp);
    else if (s == "moe" || s == "E")
      out.push_back(block_kind::moe);
    else
      throw error("tf: nemotron_h config.json has the unknown layer type '{}'", s);
  };
  for (char const* k : {"layers_block_type", "layer_types"})
    if (c.contains(k) && c.at(k).is_array()) {
      for (auto const& t : c.at(k)) {
        if (!t.is_string()) throw error("tf: nemotron_h config.json {} holds a non-string", k);
        add(t.get<std::string>());
      }
      return out;
    }
  if (c.contains("hybrid_override_pattern") && c.at("hybrid_override_pattern").is_string()) {
    for (char ch : c.at("hybrid_override_pattern").get<std::string>()) add(std::string(1, ch));
    return out;
  }
  throw error("tf: nemotron_h config.json lacks layers_block_type and hybrid_override_pattern");
}

/// Reads an HF Nemotron-H config.json (transformers 5 names, or the checkpoints' mamba_* ones).
inline nemotron_h_hparams hparams_from_config(nlohmann::json const& c) {
  nemotron_h_hparams hp;
  auto find = [&](std::initializer_list<char const*> ks) -> nlohmann::json const* {
    for (char const* k : ks)
      if (c.contains(k) && !c.at(k).is_null()) return &c.at(k);
    return nullptr;
  };
  auto need = [&](std::initializer_list<char const*> ks) {
    auto const* v = find(ks);
    if (!v || !v->is_number_integer())
      throw error("tf: nemotron_h config.json lacks the integer key {}", *ks.begin());
    return model::config_int(*v);
  };
  auto opt = [&](std::initializer_list<char const*> ks, double d) {
    auto const* v = find(ks);
    return v && v->is_number() ? v->get<double>() : d;
  };
  hp.layers = layer_kinds_from_config(c);
  if (hp.layers.empty()) throw error("tf: nemotron_h config.json has no layers");
  hp.vocab_size = need({"vocab_size"});
  hp.hidden_size = need({"hidden_size"});
  auto act = [&](char const* k, char const* want) {
    auto const* v = find({k});
    if (v && (!v->is_string() || v->get<std::string>() != want))
      throw error("tf: nemotron_h config.json {} is {}, only {} is supported", k, v->dump(), want);
  };
  act("mlp_hidden_act", "relu2");
  act("mamba_hidden_act", "silu");
  if (hp.count(block_kind::attention) > 0) {
    hp.num_heads = need({"num_attention_heads"});
    if (hp.num_heads <= 0)
      throw error("tf: nemotron_h config.json has {} attention heads", hp.num_heads);
    hp.num_kv_heads = model::config_int(opt({"num_key_value_heads"}, hp.num_heads));
    hp.head_dim =
        model::config_int(opt({"head_dim", "attention_head_dim"}, hp.hidden_size / hp.num_heads));
  }
  if (hp.count(block_kind::mlp) > 0) hp.intermediate_size = need({"intermediate_size"});
  if (hp.count(block_kind::mamba) > 0) {
    hp.mamba_num_heads = need({"mamba_num_heads"});
    hp.mamba_head_dim = need({"mamba_head_dim"});
    hp.ssm_state_size = need({"ssm_state_size"});
    hp.mamba_n_groups = model::config_int(opt({"n_groups", "mamba_n_groups"}, 8));
    hp.mamba_d_conv = model::config_int(opt({"conv_kernel", "mamba_d_conv"}, 4));
    if (auto const* lim = find({"time_step_limit", "mamba_dt_limit"});
        lim && lim->is_array() && lim->size() == 2) {
      auto num = [](nlohmann::json const& v, float d) {
        return v.is_number() ? v.get<float>() : d;  // null or a string: Infinity written badly
      };
      hp.dt_min = num(lim->at(0), 0.0f);
      hp.dt_max = num(lim->at(1), std::numeric_limits<float>::infinity());
    }
  }
  if (hp.count(block_kind::moe) > 0) {
    hp.n_routed_experts = need({"n_routed_experts", "num_local_experts"});
    hp.num_experts_per_tok = need({"num_experts_per_tok"});
    hp.moe_intermediate_size = need({"moe_intermediate_size"});
    // One shared expert of this size, whatever n_shared_experts says (as transformers builds it).
    hp.moe_shared_expert_intermediate_size =
        model::config_int(opt({"moe_shared_expert_intermediate_size"}, 0));
    hp.moe_latent_size = model::config_int(opt({"moe_latent_size"}, 0));
    hp.n_group = model::config_int(opt({"n_group"}, 1));
    hp.topk_group = model::config_int(opt({"topk_group"}, 1));
    hp.routed_scaling_factor = static_cast<float>(opt({"routed_scaling_factor"}, 1.0));
    auto const* norm = find({"norm_topk_prob"});
    hp.norm_topk_prob = norm && norm->is_boolean() ? norm->get<bool>() : true;
  }
  hp.layer_norm_epsilon = static_cast<float>(opt({"layer_norm_epsilon", "rms_norm_eps"}, 1e-5));
  hp.context_length = model::config_int(opt({"max_position_embeddings"}, 4096));
  return hp;
}

/// The hyper-parameters of `file` (GGUF metadata or config.json).
inline nemotron_h_hparams read_hparams(model::model_file const& file) {
  if (auto const* g = file.gguf()) return hparams_from_gguf(*g);
  if (file.architecture() != "nemotron_h")
    throw error("tf: expected a nemotron_h config.json, model_type is '{}'", file.architecture());
  return hparams_from_config(file.hf()->config());
}

}  // namespace tf::families::nemotron
