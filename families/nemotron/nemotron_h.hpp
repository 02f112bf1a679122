#pragma once
/// Nemotron-H (nemotron_h, nemotron_h_moe): hybrid Mamba2 + attention; hyper-parameters, tensor map
/// and traits. Its pool holds KV pages for the attention layers and recurrent-state slots.
#include <tf/family.hpp>
#include <tf/kv/hybrid_pool.hpp>
#include <tf/model/tensor_names.hpp>

#include <array>
#include <string_view>
#include <vector>

namespace tf::families::nemotron {

enum class block_kind : unsigned char { mamba, attention, mlp, moe };

/// Nemotron-H hyper-parameters; defaults are the tiny reference model's of families.md.
struct nemotron_h_hparams {
  int vocab_size = 0;
  int hidden_size = 64;
  std::vector<block_kind> layers{block_kind::mamba, block_kind::attention, block_kind::moe,
                                 block_kind::mamba};
  int num_heads = 4;
  int num_kv_heads = 2;
  int head_dim = 16;
  int intermediate_size = 128;
  int mamba_num_heads = 8;
  int mamba_head_dim = 16;
  int mamba_n_groups = 2;
  int ssm_state_size = 16;
  int mamba_d_conv = 4;
  int n_routed_experts = 4;
  int num_experts_per_tok = 2;
  int moe_intermediate_size = 32;
  int moe_shared_expert_intermediate_size = 32;
  float routed_scaling_factor = 2.5f;
  bool norm_topk_prob = true;
  float layer_norm_epsilon = 1e-5f;

  int d_inner() const { return mamba_num_heads * mamba_head_dim; }
  int conv_dim() const { return d_inner() + 2 * mamba_n_groups * ssm_state_size; }
};

using model::tensor_role;
inline constexpr std::array<model::tensor_name, 23> nemotron_h_tensors{{
    {tensor_role::token_embd, "token_embd.weight", "backbone.embeddings.weight", false, false},
    {tensor_role::output_norm, "output_norm.weight", "backbone.norm_f.weight", false, false},
    {tensor_role::output, "output.weight", "lm_head.weight", false, false},
    {tensor_role::attn_norm, "blk.{}.attn_norm.weight", "backbone.layers.{}.norm.weight", true,
     false},
    {tensor_role::ssm_in, "blk.{}.ssm_in.weight", "backbone.layers.{}.mixer.in_proj.weight", true,
     true},
    {tensor_role::ssm_conv1d, "blk.{}.ssm_conv1d.weight", "backbone.layers.{}.mixer.conv1d.weight",
     true, true},
    {tensor_role::ssm_conv1d_bias, "blk.{}.ssm_conv1d.bias", "backbone.layers.{}.mixer.conv1d.bias",
     true, true},
    {tensor_role::ssm_dt_bias, "blk.{}.ssm_dt.bias", "backbone.layers.{}.mixer.dt_bias", true,
     true},
    {tensor_role::ssm_a, "blk.{}.ssm_a", "backbone.layers.{}.mixer.A_log", true, true},
    {tensor_role::ssm_d, "blk.{}.ssm_d", "backbone.layers.{}.mixer.D", true, true},
    {tensor_role::ssm_norm, "blk.{}.ssm_norm.weight", "backbone.layers.{}.mixer.norm.weight", true,
     true},
    {tensor_role::ssm_out, "blk.{}.ssm_out.weight", "backbone.layers.{}.mixer.out_proj.weight",
     true, true},
    {tensor_role::attn_q, "blk.{}.attn_q.weight", "backbone.layers.{}.mixer.q_proj.weight", true,
     true},
    {tensor_role::attn_k, "blk.{}.attn_k.weight", "backbone.layers.{}.mixer.k_proj.weight", true,
     true},
    {tensor_role::attn_v, "blk.{}.attn_v.weight", "backbone.layers.{}.mixer.v_proj.weight", true,
     true},
    {tensor_role::attn_output, "blk.{}.attn_output.weight",
     "backbone.layers.{}.mixer.o_proj.weight", true, true},
    {tensor_role::ffn_up, "blk.{}.ffn_up.weight", "backbone.layers.{}.mixer.up_proj.weight", true,
     true},
    {tensor_role::ffn_down, "blk.{}.ffn_down.weight", "backbone.layers.{}.mixer.down_proj.weight",
     true, true},
    {tensor_role::ffn_gate_inp, "blk.{}.ffn_gate_inp.weight",
     "backbone.layers.{}.mixer.gate.weight", true, true},
    {tensor_role::exp_probs_b, "blk.{}.exp_probs_b.bias",
     "backbone.layers.{}.mixer.gate.e_score_correction_bias", true, true},
    {tensor_role::ffn_up_exps, "blk.{}.ffn_up_exps.weight", "", true, true},
    {tensor_role::ffn_down_exps, "blk.{}.ffn_down_exps.weight", "", true, true},
    {tensor_role::ffn_up_shexp, "blk.{}.ffn_up_shexp.weight",
     "backbone.layers.{}.mixer.shared_experts.up_proj.weight", true, true},
}};

struct nemotron_h {
  static constexpr std::string_view name = "nemotron_h";
  static constexpr std::array<std::string_view, 2> arch_names{"nemotron_h", "nemotron_h_moe"};
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = nemotron_h_hparams;
};

}  // namespace tf::families::nemotron
