#pragma once
/// Nemotron-H's hyper-parameters (nemotron_h, nemotron_h_moe) and tensor map.
#include <tf/model/tensor_names.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

namespace tf::families::nemotron {

/// What a block's one mixer is: each block is x + mixer(rmsnorm(x)).
enum class block_kind : unsigned char { mamba, attention, mlp, moe };

/// Nemotron-H hyper-parameters (the transformers names; GGUF's per-layer arrays give `layers`).
struct nemotron_h_hparams {
  int vocab_size = 0;
  int hidden_size = 0;
  std::vector<block_kind> layers;
  int num_heads = 0;  // attention layers
  int num_kv_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;  // dense relu² MLP layers
  // Mamba2 layers.
  int mamba_num_heads = 0;
  int mamba_head_dim = 0;
  int mamba_n_groups = 1;
  int ssm_state_size = 0;
  int mamba_d_conv = 4;
  float dt_min = 0.0f;  // softplus(dt + dt_bias) clamped to [dt_min, dt_max] (time_step_limit)
  float dt_max = std::numeric_limits<float>::infinity();
  // MoE layers.
  int n_routed_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  int moe_shared_expert_intermediate_size = 0;
  int moe_latent_size = 0;  // 0: the experts read the hidden state (no fc1/fc2 latent projections)
  int n_group = 1;
  int topk_group = 1;
  float routed_scaling_factor = 1.0f;
  bool norm_topk_prob = true;
  float layer_norm_epsilon = 1e-5f;
  int context_length = 4096;

  int num_layers() const { return static_cast<int>(layers.size()); }
  int count(block_kind k) const { return static_cast<int>(std::ranges::count(layers, k)); }
  int d_inner() const { return mamba_num_heads * mamba_head_dim; }
  int conv_dim() const { return d_inner() + 2 * mamba_n_groups * ssm_state_size; }
  /// in_proj's outputs: z (d_inner) | xBC (conv_dim) | dt (heads).
  int in_proj_size() const { return d_inner() + conv_dim() + mamba_num_heads; }
  /// Floats of one Mamba layer's state: the conv window [K-1, conv_dim], then the SSM state
  /// [heads, head_dim, state_size].
  std::int64_t conv_floats() const {
    return static_cast<std::int64_t>(mamba_d_conv - 1) * conv_dim();
  }
  std::int64_t ssm_floats() const { return static_cast<std::int64_t>(d_inner()) * ssm_state_size; }
};

using model::tensor_role;
/// GGUF and HF names. HF names are the checkpoints' `backbone.` ones (transformers 5 loads them as
/// `model.`; the binder accepts either). Experts: GGUF stacks them (ffn_*_exps); HF checkpoints
/// keep one tensor per expert (second {} = expert), transformers 5 may save them stacked.
inline constexpr std::array<model::tensor_name, 26> nemotron_h_tensors{{
    {tensor_role::token_embd, "token_embd.weight", "backbone.embeddings.weight", false, false},
    {tensor_role::output_norm, "output_norm.weight", "backbone.norm_f.weight", false, false},
    {tensor_role::output, "output.weight", "lm_head.weight", false, true},
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
    {tensor_role::ffn_up_exps, "blk.{}.ffn_up_exps.weight",
     "backbone.layers.{}.mixer.experts.{}.up_proj.weight", true, true},
    {tensor_role::ffn_down_exps, "blk.{}.ffn_down_exps.weight",
     "backbone.layers.{}.mixer.experts.{}.down_proj.weight", true, true},
    {tensor_role::ffn_up_shexp, "blk.{}.ffn_up_shexp.weight",
     "backbone.layers.{}.mixer.shared_experts.up_proj.weight", true, true},
    {tensor_role::ffn_down_shexp, "blk.{}.ffn_down_shexp.weight",
     "backbone.layers.{}.mixer.shared_experts.down_proj.weight", true, true},
    {tensor_role::ffn_latent_down, "blk.{}.ffn_latent_down.weight",
     "backbone.layers.{}.mixer.fc1_latent_proj.weight", true, true},
    {tensor_role::ffn_latent_up, "blk.{}.ffn_latent_up.weight",
     "backbone.layers.{}.mixer.fc2_latent_proj.weight", true, true},
}};

}  // namespace tf::families::nemotron
