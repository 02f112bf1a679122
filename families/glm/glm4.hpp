#pragma once
/// GLM-4 dense (glm4): hyper-parameters, tensor map and traits.
#include <families/common/paged_family.hpp>
#include <tf/model/tensor_names.hpp>

#include <array>
#include <string_view>

namespace tf::families::glm {

/// GLM-4 hyper-parameters; defaults are GLM-4-9B-0414's.
struct glm4_hparams {
  int vocab_size = 151552;
  int hidden_size = 4096;
  int intermediate_size = 13696;
  int num_layers = 40;
  int num_heads = 32;
  int num_kv_heads = 2;
  int head_dim = 128;
  int rope_dims = 64;  // interleaved (GPT-J) pairs on the first rope_dims of each head
  float rope_theta = 1e4f;
  float rms_norm_eps = 1e-5f;
  bool attention_bias = true;
  int context_length = 32768;
};

using model::tensor_role;
/// The GGUF name trap: `post_attention_norm` is HF's post_self_attn_layernorm, and `ffn_norm` is
/// HF's post_attention_layernorm. `ffn_up` holds gate and up fused (gate half first), unless a
/// separate `ffn_gate` is present.
inline constexpr std::array<model::tensor_name, 17> glm4_tensors{{
    {tensor_role::token_embd, "token_embd.weight", "model.embed_tokens.weight", false, false},
    {tensor_role::output_norm, "output_norm.weight", "model.norm.weight", false, false},
    {tensor_role::output, "output.weight", "lm_head.weight", false, false},
    {tensor_role::attn_norm, "blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight",
     true, false},
    {tensor_role::attn_q, "blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", true,
     false},
    {tensor_role::attn_k, "blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", true,
     false},
    {tensor_role::attn_v, "blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", true,
     false},
    {tensor_role::attn_q_bias, "blk.{}.attn_q.bias", "model.layers.{}.self_attn.q_proj.bias", true,
     true},
    {tensor_role::attn_k_bias, "blk.{}.attn_k.bias", "model.layers.{}.self_attn.k_proj.bias", true,
     true},
    {tensor_role::attn_v_bias, "blk.{}.attn_v.bias", "model.layers.{}.self_attn.v_proj.bias", true,
     true},
    {tensor_role::attn_output, "blk.{}.attn_output.weight",
     "model.layers.{}.self_attn.o_proj.weight", true, false},
    {tensor_role::post_attention_norm, "blk.{}.post_attention_norm.weight",
     "model.layers.{}.post_self_attn_layernorm.weight", true, false},
    {tensor_role::ffn_norm, "blk.{}.ffn_norm.weight",
     "model.layers.{}.post_attention_layernorm.weight", true, false},
    {tensor_role::ffn_up, "blk.{}.ffn_up.weight", "model.layers.{}.mlp.gate_up_proj.weight", true,
     false},
    {tensor_role::ffn_gate, "blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", true,
     true},
    {tensor_role::ffn_down, "blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", true,
     false},
    {tensor_role::post_ffw_norm, "blk.{}.post_ffw_norm.weight",
     "model.layers.{}.post_mlp_layernorm.weight", true, false},
}};

struct glm4 : paged_cpu_family<glm4_hparams> {
  static constexpr std::string_view name = "glm4";
  static constexpr std::array<std::string_view, 1> arch_names{"glm4"};
};

}  // namespace tf::families::glm
