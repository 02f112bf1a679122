#pragma once
/// GLM-4 dense's hyper-parameters and tensor map.
#include <tf/model/tensor_names.hpp>

#include <array>

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

/// Whether the attention and dense shapes of `hp` (GLM-4's or GLM-4.5's) describe a model.
template <class HParams>
bool attention_hparams_ok(HParams const& hp) {
  return hp.num_heads > 0 && hp.num_kv_heads > 0 && hp.num_heads % hp.num_kv_heads == 0 &&
         hp.head_dim > 0 && hp.rope_dims >= 0 && hp.rope_dims <= hp.head_dim &&
         hp.rope_dims % 2 == 0 && hp.hidden_size > 0 && hp.num_layers > 0 && hp.vocab_size > 0 &&
         hp.intermediate_size > 0;
}

}  // namespace tf::families::glm
