#pragma once
/// GLM-4.5 MoE (glm4_moe / GGUF glm4moe): hyper-parameters and traits.
#include <families/common/paged_family.hpp>

#include <array>
#include <string_view>

namespace tf::families::glm {

/// GLM-4.5 MoE hyper-parameters; defaults are the transformers class defaults.
struct glm4_moe_hparams {
  int vocab_size = 151552;
  int hidden_size = 4096;
  int intermediate_size = 10944;  // the leading dense layers' SwiGLU
  int moe_intermediate_size = 1408;
  int num_layers = 46;  // decoder layers, without the MTP (nextn) layers
  int num_heads = 96;
  int num_kv_heads = 8;
  int head_dim = 128;
  int rope_dims = 64;  // NeoX rotate-half on the first rope_dims of each head
  float rope_theta = 1e4f;
  float rms_norm_eps = 1e-5f;
  bool attention_bias = true;
  bool use_qk_norm = false;
  int first_k_dense_replace = 1;
  int num_experts = 128;
  int experts_per_tok = 8;
  int num_shared_experts = 1;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  int context_length = 131072;
};

struct glm4_moe : paged_cpu_family<glm4_moe_hparams> {
  static constexpr std::string_view name = "glm4_moe";
  static constexpr std::array<std::string_view, 2> arch_names{"glm4_moe", "glm4moe"};
};

}  // namespace tf::families::glm
