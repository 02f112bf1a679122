#pragma once
/// GLM-4.5 MoE's hyper-parameters and tensor map.
#include <tf/model/tensor_names.hpp>

#include <array>

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

using model::tensor_role;
/// The GGUF name trap: glm4moe's `post_attention_norm` is the pre-FFN norm (HF's
/// post_attention_layernorm). Experts are stacked in GGUF (ffn_*_exps, {} = layer) and one tensor
/// per expert in HF (the second {} = expert); transformers 5 may stack them too (see
/// glm4_moe_weights.hpp).
inline constexpr std::array<model::tensor_name, 25> glm4_moe_tensors{{
    {tensor_role::token_embd, "token_embd.weight", "model.embed_tokens.weight", false, false},
    {tensor_role::output_norm, "output_norm.weight", "model.norm.weight", false, false},
    {tensor_role::output, "output.weight", "lm_head.weight", false, true},
    {tensor_role::attn_norm, "blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight",
     true, false},
    {tensor_role::ffn_norm, "blk.{}.post_attention_norm.weight",
     "model.layers.{}.post_attention_layernorm.weight", true, false},
    {tensor_role::attn_q, "blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", true,
     false},
    {tensor_role::attn_k, "blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", true,
     false},
    {tensor_role::attn_v, "blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", true,
     false},
    {tensor_role::attn_output, "blk.{}.attn_output.weight",
     "model.layers.{}.self_attn.o_proj.weight", true, false},
    {tensor_role::attn_q_bias, "blk.{}.attn_q.bias", "model.layers.{}.self_attn.q_proj.bias", true,
     true},
    {tensor_role::attn_k_bias, "blk.{}.attn_k.bias", "model.layers.{}.self_attn.k_proj.bias", true,
     true},
    {tensor_role::attn_v_bias, "blk.{}.attn_v.bias", "model.layers.{}.self_attn.v_proj.bias", true,
     true},
    {tensor_role::attn_q_norm, "blk.{}.attn_q_norm.weight",
     "model.layers.{}.self_attn.q_norm.weight", true, true},
    {tensor_role::attn_k_norm, "blk.{}.attn_k_norm.weight",
     "model.layers.{}.self_attn.k_norm.weight", true, true},
    {tensor_role::ffn_gate, "blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", true,
     true},
    {tensor_role::ffn_up, "blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", true, true},
    {tensor_role::ffn_down, "blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", true,
     true},
    {tensor_role::ffn_gate_inp, "blk.{}.ffn_gate_inp.weight", "model.layers.{}.mlp.gate.weight",
     true, true},
    {tensor_role::exp_probs_b, "blk.{}.exp_probs_b.bias",
     "model.layers.{}.mlp.gate.e_score_correction_bias", true, true},
    {tensor_role::ffn_gate_shexp, "blk.{}.ffn_gate_shexp.weight",
     "model.layers.{}.mlp.shared_experts.gate_proj.weight", true, true},
    {tensor_role::ffn_up_shexp, "blk.{}.ffn_up_shexp.weight",
     "model.layers.{}.mlp.shared_experts.up_proj.weight", true, true},
    {tensor_role::ffn_down_shexp, "blk.{}.ffn_down_shexp.weight",
     "model.layers.{}.mlp.shared_experts.down_proj.weight", true, true},
    {tensor_role::ffn_gate_exps, "blk.{}.ffn_gate_exps.weight",
     "model.layers.{}.mlp.experts.{}.gate_proj.weight", true, true},
    {tensor_role::ffn_up_exps, "blk.{}.ffn_up_exps.weight",
     "model.layers.{}.mlp.experts.{}.up_proj.weight", true, true},
    {tensor_role::ffn_down_exps, "blk.{}.ffn_down_exps.weight",
     "model.layers.{}.mlp.experts.{}.down_proj.weight", true, true},
}};

}  // namespace tf::families::glm
