#pragma once
/// Gemma 4's hyper-parameters: per-layer attention shapes (sliding and full layers differ), the
/// KV-shared last layers, and what the E (per-layer embedding) and MoE models add.
#include <tf/backend/backend.hpp>

#include <cstdint>
#include <vector>

namespace tf::families::gemma {

/// Gemma 4 hyper-parameters; the defaults are transformers' Gemma4TextConfig's.
struct gemma4_hparams {
  int vocab_size = 262144;
  int hidden_size = 2304;
  int intermediate_size = 9216;
  int num_layers = 30;
  int num_heads = 8;
  int num_kv_heads = 4;  // sliding layers
  int head_dim = 256;    // sliding layers
  int num_global_kv_heads = 4;
  int global_head_dim = 512;
  int sliding_window = 512;
  std::vector<char> sliding;  // per layer: 1 for a sliding-window layer, 0 for a full one
  float rope_theta_local = 1e4f;
  float rope_theta_global = 1e6f;
  float partial_rotary_factor = 0.25f;  // of the full layers' proportional RoPE
  float rope_scaling_factor = 1.0f;     // the full layers' frequencies are divided by it
  bool k_eq_v = false;                  // full layers take V from k_proj's output
  int num_kv_shared_layers = 0;         // the last layers reuse an earlier layer's KV
  bool double_wide_mlp = false;         // KV-shared layers' MLP is twice as wide
  std::vector<int> ffn_widths;  // each layer's MLP width as a GGUF lists it; empty: the rule
  int ple_dim = 0;              // hidden_size_per_layer_input (0: no PLE)
  int ple_vocab = 0;            // vocab_size_per_layer_input
  bool moe = false;
  int num_experts = 0;
  int top_k_experts = 0;
  int moe_intermediate_size = 0;
  float rms_norm_eps = 1e-6f;
  float final_logit_softcap = 0.0f;  // 0: none
  int context_length = 131072;

  bool is_sliding(int l) const { return sliding[static_cast<std::size_t>(l)] != 0; }
  int first_shared_layer() const { return num_layers - num_kv_shared_layers; }
  bool is_kv_shared(int l) const { return l >= first_shared_layer(); }
  /// The layer whose KV layer `l` reads: itself, or for a KV-shared layer the last layer of its
  /// kind (sliding or full) that holds its own; -1 where there is none.
  int kv_source(int l) const {
    if (!is_kv_shared(l)) return l;
    for (int j = first_shared_layer() - 1; j >= 0; --j)
      if (is_sliding(j) == is_sliding(l)) return j;
    return -1;
  }
  int layer_kv_heads(int l) const { return is_sliding(l) ? num_kv_heads : num_global_kv_heads; }
  int layer_head_dim(int l) const { return is_sliding(l) ? head_dim : global_head_dim; }
  /// Full layers with k_eq_v have no v_proj.
  bool v_from_k(int l) const { return k_eq_v && !is_sliding(l); }
  std::int64_t ffn_size(int l) const {
    if (!ffn_widths.empty()) return ffn_widths[static_cast<std::size_t>(l)];
    return std::int64_t{intermediate_size} * (double_wide_mlp && is_kv_shared(l) ? 2 : 1);
  }
  /// Every layer's KV shape; a KV-shared layer holds none and reads its source's.
  backend::kv_layout kv_layout() const {
    backend::kv_layout k{num_layers, num_kv_heads, head_dim, {}};
    for (int l = 0; l < num_layers; ++l)
      k.per_layer.push_back(
          {layer_kv_heads(l), layer_head_dim(l), is_kv_shared(l) ? kv_source(l) : -1});
    return k;
  }
};

}  // namespace tf::families::gemma
