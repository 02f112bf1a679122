#pragma once
/// Qwen3's hyper-parameters and tensor map.
#include <tf/model/tensor_names.hpp>

#include <array>

namespace tf::families::qwen {

/// Qwen3 hyper-parameters; defaults are Qwen3-0.6B's.
struct qwen3_hparams {
  int vocab_size = 151936;
  int hidden_size = 1024;
  int intermediate_size = 3072;
  int num_layers = 28;
  int num_heads = 16;
  int num_kv_heads = 8;
  int head_dim = 128;
  float rope_theta = 1e6f;
  float rope_scaling_factor = 1.0f;  // linear position scaling; 1 = none
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = true;
  int context_length = 40960;
};

using model::tensor_role;
inline constexpr std::array<model::tensor_name, 14> qwen3_tensors{{
    {tensor_role::token_embd, "token_embd.weight", "model.embed_tokens.weight", false, false},
    {tensor_role::output_norm, "output_norm.weight", "model.norm.weight", false, false},
    {tensor_role::output, "output.weight", "lm_head.weight", false, true},
    {tensor_role::attn_norm, "blk.{}.attn_norm.weight", "model.layers.{}.input_layernorm.weight",
     true, false},
    {tensor_role::attn_q, "blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight", true,
     false},
    {tensor_role::attn_k, "blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight", true,
     false},
    {tensor_role::attn_v, "blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight", true,
     false},
    {tensor_role::attn_output, "blk.{}.attn_output.weight",
     "model.layers.{}.self_attn.o_proj.weight", true, false},
    {tensor_role::attn_q_norm, "blk.{}.attn_q_norm.weight",
     "model.layers.{}.self_attn.q_norm.weight", true, false},
    {tensor_role::attn_k_norm, "blk.{}.attn_k_norm.weight",
     "model.layers.{}.self_attn.k_norm.weight", true, false},
    {tensor_role::ffn_norm, "blk.{}.ffn_norm.weight",
     "model.layers.{}.post_attention_layernorm.weight", true, false},
    {tensor_role::ffn_gate, "blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", true,
     false},
    {tensor_role::ffn_up, "blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", true,
     false},
    {tensor_role::ffn_down, "blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", true,
     false},
}};

}  // namespace tf::families::qwen
