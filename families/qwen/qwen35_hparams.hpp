#pragma once
/// Qwen3.5 / 3.6 (qwen35, qwen35moe; HF qwen3_5(_text), qwen3_5_moe(_text)) and Qwen3-Next
/// (qwen3next; HF qwen3_next): hyper-parameters and tensor names. Layers are Gated DeltaNet (linear
/// attention, a recurrent state per stream) or gated full attention; the MLP is dense SwiGLU
/// (qwen35) or routed experts plus a sigmoid-gated shared expert (qwen35moe, qwen3next).
#include <tf/model/tensor_names.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tf::families::qwen {

/// What a layer's token mixer is.
enum class qwen35_layer : unsigned char { linear_attention, full_attention };

/// Qwen3.5 hyper-parameters; defaults are transformers' Qwen3_5TextConfig's.
struct qwen35_hparams {
  int vocab_size = 248320;
  int hidden_size = 4096;
  int intermediate_size = 12288;  // the dense MLP (qwen35)
  int num_layers = 32;
  int num_heads = 16;
  int num_kv_heads = 4;
  int head_dim = 256;
  int rotary_dims = 64;  // NeoX RoPE on the first rotary_dims of each head
  float rope_theta = 1e7f;
  std::array<int, 4> mrope_sections{11, 11, 10, 0};  // text positions make MRoPE plain NeoX
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  int context_length = 32768;

  // Gated DeltaNet layers.
  int linear_num_key_heads = 16;
  int linear_num_value_heads = 32;
  int linear_key_head_dim = 128;
  int linear_value_head_dim = 128;
  int linear_conv_kernel_dim = 4;
  /// llama.cpp's qwen35 GGUFs keep value heads tiled (head j reads k-head j % nk); HF groups
  /// them (j / (nv / nk)).
  bool tiled_v_heads = false;
  std::vector<qwen35_layer> layer_types;  // [num_layers]

  // Routed experts (qwen35moe, qwen3next); 0 experts: a dense MLP on every layer.
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  int shared_expert_intermediate_size = 0;
  bool norm_topk_prob = true;  // renormalise the top-k weights (Qwen3.5-MoE always does)
  // Qwen3-Next's dense layers among the routed ones (as Qwen3-MoE's); Qwen3.5 routes every layer.
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;

  bool is_moe() const { return num_experts > 0; }
  /// Whether layer i routes its MLP through the experts.
  bool is_moe(int i) const {
    return is_moe() && decoder_sparse_step > 0 && (i + 1) % decoder_sparse_step == 0 &&
           std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) == mlp_only_layers.end();
  }
  bool is_full_attention(int i) const {
    return layer_types.at(static_cast<std::size_t>(i)) == qwen35_layer::full_attention;
  }
  int count(qwen35_layer kind) const {
    int n = 0;
    for (auto t : layer_types) n += t == kind;
    return n;
  }
  /// Channels of the conv over [q | k | v].
  std::int64_t conv_dim() const {
    return 2ll * linear_num_key_heads * linear_key_head_dim +
           static_cast<std::int64_t>(linear_num_value_heads) * linear_value_head_dim;
  }
  /// f32 of one GDN layer's state: the conv window, then the delta-rule state.
  std::int64_t conv_state_floats() const { return (linear_conv_kernel_dim - 1) * conv_dim(); }
  std::int64_t state_floats() const {
    return conv_state_floats() + static_cast<std::int64_t>(linear_num_value_heads) *
                                     linear_key_head_dim * linear_value_head_dim;
  }
};

/// The full-attention layers' pattern of transformers and llama.cpp: layer i attends iff
/// (i + 1) % interval == 0.
inline std::vector<qwen35_layer> qwen35_interval_layers(int layers, int interval) {
  std::vector<qwen35_layer> t;
  for (int i = 0; i < layers; ++i)
    t.push_back(interval > 0 && (i + 1) % interval == 0 ? qwen35_layer::full_attention
                                                        : qwen35_layer::linear_attention);
  return t;
}

using model::tensor_role;
/// Tensors with a canonical role. HF names are Qwen3_5ForCausalLM's (model.layers.*); the
/// multimodal wrappers' text part (model.language_model.*) is found through qwen35_hf_view.
/// GGUF norms carry llama.cpp's +1 (except ssm_norm); HF's are zero-centred.
inline constexpr std::array<model::tensor_name, 27> qwen35_tensors{{
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
    {tensor_role::attn_q_norm, "blk.{}.attn_q_norm.weight",
     "model.layers.{}.self_attn.q_norm.weight", true, false},
    {tensor_role::attn_k_norm, "blk.{}.attn_k_norm.weight",
     "model.layers.{}.self_attn.k_norm.weight", true, false},
    {tensor_role::ssm_conv1d, "blk.{}.ssm_conv1d.weight",
     "model.layers.{}.linear_attn.conv1d.weight", true, false},
    {tensor_role::ssm_dt_bias, "blk.{}.ssm_dt.bias", "model.layers.{}.linear_attn.dt_bias", true,
     false},
    // GGUF: -exp(A_log); HF: A_log.
    {tensor_role::ssm_a, "blk.{}.ssm_a", "model.layers.{}.linear_attn.A_log", true, false},
    {tensor_role::ssm_norm, "blk.{}.ssm_norm.weight", "model.layers.{}.linear_attn.norm.weight",
     true, false},
    {tensor_role::ssm_out, "blk.{}.ssm_out.weight", "model.layers.{}.linear_attn.out_proj.weight",
     true, false},
    {tensor_role::ffn_gate, "blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight", true,
     false},
    {tensor_role::ffn_up, "blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", true,
     false},
    {tensor_role::ffn_down, "blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight", true,
     false},
    {tensor_role::ffn_gate_inp, "blk.{}.ffn_gate_inp.weight", "model.layers.{}.mlp.gate.weight",
     true, false},
    {tensor_role::ffn_gate_exps, "blk.{}.ffn_gate_exps.weight",
     "model.layers.{}.mlp.experts.{}.gate_proj.weight", true, false},
    {tensor_role::ffn_up_exps, "blk.{}.ffn_up_exps.weight",
     "model.layers.{}.mlp.experts.{}.up_proj.weight", true, false},
    {tensor_role::ffn_down_exps, "blk.{}.ffn_down_exps.weight",
     "model.layers.{}.mlp.experts.{}.down_proj.weight", true, false},
    {tensor_role::ffn_gate_shexp, "blk.{}.ffn_gate_shexp.weight",
     "model.layers.{}.mlp.shared_expert.gate_proj.weight", true, false},
    {tensor_role::ffn_up_shexp, "blk.{}.ffn_up_shexp.weight",
     "model.layers.{}.mlp.shared_expert.up_proj.weight", true, false},
    {tensor_role::ffn_down_shexp, "blk.{}.ffn_down_shexp.weight",
     "model.layers.{}.mlp.shared_expert.down_proj.weight", true, false},
    {tensor_role::ssm_in, "blk.{}.attn_qkv.weight",
     "model.layers.{}.linear_attn.in_proj_qkv.weight", true, false},
}};

/// A tensor without a canonical role: its GGUF and HF names (`{}` = the layer).
struct qwen35_name {
  std::string_view gguf, hf;
};
inline constexpr qwen35_name qwen35_in_proj_z{"blk.{}.attn_gate.weight",
                                              "model.layers.{}.linear_attn.in_proj_z.weight"};
inline constexpr qwen35_name qwen35_in_proj_b{"blk.{}.ssm_beta.weight",
                                              "model.layers.{}.linear_attn.in_proj_b.weight"};
inline constexpr qwen35_name qwen35_in_proj_a{"blk.{}.ssm_alpha.weight",
                                              "model.layers.{}.linear_attn.in_proj_a.weight"};
inline constexpr qwen35_name qwen35_shared_gate{"blk.{}.ffn_gate_inp_shexp.weight",
                                                "model.layers.{}.mlp.shared_expert_gate.weight"};
/// Gate and up of every expert in one stack: GGUF {hidden, 2 ff, experts}; HF [experts, 2 ff,
/// hidden] (transformers 5), with down [experts, hidden, ff].
inline constexpr qwen35_name qwen35_gate_up_exps{"blk.{}.ffn_gate_up_exps.weight",
                                                 "model.layers.{}.mlp.experts.gate_up_proj"};
inline constexpr std::string_view qwen35_hf_down_exps = "model.layers.{}.mlp.experts.down_proj";

}  // namespace tf::families::qwen
