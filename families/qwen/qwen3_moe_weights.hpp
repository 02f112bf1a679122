#pragma once
/// Qwen3-MoE weights: Qwen3's, plus per MoE layer the router and the experts (sliced from GGUF's
/// stacked ffn_*_exps, or bound from HF's per-expert tensors).
#include <families/common/moe.hpp>
#include <families/qwen/qwen3_moe.hpp>
#include <families/qwen/qwen3_weights.hpp>
#include <tf/error.hpp>

#include <cstdint>
#include <vector>

namespace tf::families::qwen {

/// A decoder layer: a dense MLP (gate/up/down), or a router [num_experts, hidden] and experts.
struct qwen3_moe_layer_weights : qwen3_layer_weights {
  matrix router;
  std::vector<moe::expert_weights> experts;  // empty in a dense layer
};

/// All of a Qwen3-MoE model's weights; matrices point into the file, which must outlive this.
struct qwen3_moe_weights {
  qwen3_moe_hparams hp;
  matrix embd, output;
  std::vector<float> output_norm;
  std::vector<qwen3_moe_layer_weights> layers;
};

/// Binds the weights of `file`; throws tf::error on a missing tensor or a shape that disagrees.
template <class File>
qwen3_moe_weights bind_moe_weights(File const& file, qwen3_moe_hparams const& hp,
                                   name_style style) {
  check_hparams(hp, "qwen3_moe");
  if (hp.num_experts <= 0 || hp.num_experts_per_tok <= 0 ||
      hp.num_experts_per_tok > hp.num_experts || hp.moe_intermediate_size <= 0)
    throw error("tf: qwen3_moe hparams are inconsistent: {} experts, top-{}, expert ffn {}",
                hp.num_experts, hp.num_experts_per_tok, hp.moe_intermediate_size);
  // The attention, norms, head and dense layers are Qwen3's; bind them with Qwen3's rules.
  using model::tensor_role;
  tensor_binder<File, decltype(qwen3_moe_tensors)> b{file, qwen3_moe_tensors, style, "qwen3_moe"};
  std::int64_t const h = hp.hidden_size;
  std::int64_t const eff = hp.moe_intermediate_size, ne = hp.num_experts;
  qwen3_moe_weights w;
  w.hp = hp;
  bind_head(w, b, hp);
  for (int i = 0; i < hp.num_layers; ++i) {
    qwen3_moe_layer_weights l;
    bind_attention(l, b, hp, i);
    if (!hp.is_moe(i)) {
      bind_dense_mlp(l, b, hp, i);
      w.layers.push_back(std::move(l));
      continue;
    }
    l.router = b.mat(tensor_role::ffn_gate_inp, i, ne, h);
    std::vector<matrix> gate, up, down;
    if (style == name_style::gguf) {
      gate = moe::stacked_experts(*b.find(tensor_role::ffn_gate_exps, i, false), eff, h, ne);
      up = moe::stacked_experts(*b.find(tensor_role::ffn_up_exps, i, false), eff, h, ne);
      down = moe::stacked_experts(*b.find(tensor_role::ffn_down_exps, i, false), h, eff, ne);
    } else {
      auto expert = [&](tensor_role role, int e, std::int64_t rows, std::int64_t cols) {
        auto name = model::expand(b.name_of(role, i), e);
        auto const* t = file.find_tensor(name);
        if (!t) throw error("tf: qwen3_moe model lacks the tensor {}", name);
        return b.mat_of(t, rows, cols);
      };
      for (int e = 0; e < ne; ++e) {
        gate.push_back(expert(tensor_role::ffn_gate_exps, e, eff, h));
        up.push_back(expert(tensor_role::ffn_up_exps, e, eff, h));
        down.push_back(expert(tensor_role::ffn_down_exps, e, h, eff));
      }
    }
    for (std::size_t e = 0; e < gate.size(); ++e) l.experts.push_back({gate[e], up[e], down[e]});
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace tf::families::qwen
