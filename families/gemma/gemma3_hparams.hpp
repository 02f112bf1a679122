#pragma once
/// Gemma 3's hyper-parameters and tensor map.
#include <tf/model/tensor_names.hpp>

#include <array>
#include <string_view>

namespace tf::families::gemma {

/// Gemma 3 hyper-parameters; defaults are the 270M's.
struct gemma3_hparams {
  int vocab_size = 262144;
  int hidden_size = 640;
  int intermediate_size = 2048;
  int num_layers = 18;
  int num_heads = 4;
  int num_kv_heads = 1;
  int head_dim = 256;
  float query_pre_attn_scalar = 256.0f;
  int sliding_window = 512;
  int sliding_window_pattern = 6;  // every 6th layer (5, 11, ...) attends globally
  float rope_theta_global = 1e6f;
  float rope_theta_local = 1e4f;
  float rope_scaling_factor = 1.0f;  // linear, global layers only
  float rms_norm_eps = 1e-6f;
  float final_logit_softcap = 0.0f;  // 0: none
  int context_length = 32768;

  constexpr bool is_sliding(int layer) const {
    return sliding_window > 0 && (layer + 1) % sliding_window_pattern != 0;
  }
};

using model::tensor_role;
/// GGUF norms carry the +1 shift baked in; HF norms are zero-centred and need (1+w) on load.
inline constexpr std::array<model::tensor_name, 16> gemma3_tensors{{
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
    {tensor_role::post_attention_norm, "blk.{}.post_attention_norm.weight",
     "model.layers.{}.post_attention_layernorm.weight", true, false},
    {tensor_role::ffn_norm, "blk.{}.ffn_norm.weight",
     "model.layers.{}.pre_feedforward_layernorm.weight", true, false},
    {tensor_role::post_ffw_norm, "blk.{}.post_ffw_norm.weight",
     "model.layers.{}.post_feedforward_layernorm.weight", true, false},
    {tensor_role::ffn_gate, "blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", true,
     false},
    {tensor_role::ffn_up, "blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", true,
     false},
    {tensor_role::ffn_down, "blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", true,
     false},
}};

}  // namespace tf::families::gemma
