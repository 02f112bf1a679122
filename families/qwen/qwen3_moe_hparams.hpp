#pragma once
/// Qwen3-MoE's hyper-parameters and tensor map: Qwen3's, plus the router and the experts.
#include <families/qwen/qwen3_hparams.hpp>
#include <tf/model/tensor_names.hpp>

#include <algorithm>
#include <array>
#include <vector>

namespace tf::families::qwen {

/// Qwen3-MoE hyper-parameters; defaults are Qwen3-30B-A3B's routing.
struct qwen3_moe_hparams : qwen3_hparams {
  int num_experts = 128;
  int num_experts_per_tok = 8;
  int moe_intermediate_size = 768;
  bool norm_topk_prob = true;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;  // layers with a dense MLP

  /// Whether layer i routes its MLP through the experts.
  bool is_moe(int i) const {
    return num_experts > 0 && decoder_sparse_step > 0 && (i + 1) % decoder_sparse_step == 0 &&
           std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) == mlp_only_layers.end();
  }
};

using model::tensor_role;
/// Qwen3's tensors plus the router and the experts: stacked in GGUF (ffn_*_exps, {} = layer),
/// one tensor per expert in HF (the second {} = expert).
inline constexpr std::array<model::tensor_name, 18> qwen3_moe_tensors = [] {
  std::array<model::tensor_name, 18> t{};
  for (std::size_t i = 0; i < qwen3_tensors.size(); ++i) t[i] = qwen3_tensors[i];
  t[14] = {tensor_role::ffn_gate_inp, "blk.{}.ffn_gate_inp.weight",
           "model.layers.{}.mlp.gate.weight", true, false};
  t[15] = {tensor_role::ffn_gate_exps, "blk.{}.ffn_gate_exps.weight",
           "model.layers.{}.mlp.experts.{}.gate_proj.weight", true, false};
  t[16] = {tensor_role::ffn_up_exps, "blk.{}.ffn_up_exps.weight",
           "model.layers.{}.mlp.experts.{}.up_proj.weight", true, false};
  t[17] = {tensor_role::ffn_down_exps, "blk.{}.ffn_down_exps.weight",
           "model.layers.{}.mlp.experts.{}.down_proj.weight", true, false};
  return t;
}();

}  // namespace tf::families::qwen
