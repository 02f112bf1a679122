#pragma once
/// Qwen3-MoE weights bound from a model file to a backend: Qwen3's, plus per MoE layer the router
/// and the experts (sliced from GGUF's stacked ffn_*_exps, or bound from HF's per-expert tensors).
#include <families/common/experts.hpp>
#include <families/qwen/qwen3_moe_config.hpp>
#include <families/qwen/qwen3_moe_hparams.hpp>
#include <families/qwen/qwen3_weights.hpp>
#include <tf/error.hpp>
#include <tf/layers/moe.hpp>
#include <tf/model/model_file.hpp>

#include <cstdint>
#include <vector>

namespace tf::families::qwen {

/// A decoder layer: Qwen3's, whose MLP is dense (mlp) or routed (moe: router and experts).
template <class B>
struct qwen3_moe_layer_weights : qwen3_layer_weights<B> {
  layers::moe_weights<B> moe;  // no experts in a dense layer
};

/// All of a Qwen3-MoE model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct qwen3_moe_weights {
  qwen3_moe_hparams hp;
  typename B::matrix embd, output;
  typename B::vector output_norm;
  std::vector<qwen3_moe_layer_weights<B>> layers;
};

/// Binds the weights of `file` to `be`; throws tf::error on a missing tensor or a shape that
/// disagrees with `hp`.
template <class File, class B>
qwen3_moe_weights<B> bind_moe_weights(File const& file, qwen3_moe_hparams const& hp,
                                      name_style style, B& be) {
  check_hparams(hp, "qwen3_moe");
  if (hp.num_experts <= 0 || hp.num_experts_per_tok <= 0 ||
      hp.num_experts_per_tok > hp.num_experts || hp.moe_intermediate_size <= 0)
    throw error("tf: qwen3_moe hparams are inconsistent: {} experts, top-{}, expert ffn {}",
                hp.num_experts, hp.num_experts_per_tok, hp.moe_intermediate_size);
  // The attention, norms, head and dense layers are Qwen3's; bind them with Qwen3's rules.
  using model::tensor_role;
  tensor_binder<File, decltype(qwen3_moe_tensors), B> const b{file, qwen3_moe_tensors, style,
                                                              "qwen3_moe", be};
  std::int64_t const h = hp.hidden_size;
  qwen3_moe_weights<B> w;
  w.hp = per_rank(hp, b.ranks(), "qwen3_moe");  // this rank's heads, FFN and expert widths
  w.hp.moe_intermediate_size = dist::split_evenly(hp.moe_intermediate_size, b.ranks().size,
                                                  "qwen3_moe", "expert FFN columns");
  bind_head(w, b, w.hp);
  for (int i = 0; i < hp.num_layers; ++i) {
    auto& l = w.layers.emplace_back();
    bind_attention(l, b, w.hp, i);
    if (!hp.is_moe(i)) {
      bind_dense_mlp(l, b, w.hp, i);
      continue;
    }
    l.moe.router = b.mat(tensor_role::ffn_gate_inp, i, hp.num_experts, h);
    l.moe.experts = bind_experts(b, i, hp.num_experts, w.hp.moe_intermediate_size, h);
  }
  return w;
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
qwen3_moe_weights<B> load_moe_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_moe_weights(*g, moe_hparams_from_gguf(*g), name_style::gguf, be);
  auto const arch = file.architecture();
  if (arch != "qwen3_moe")
    throw error("tf: expected a qwen3_moe config.json, model_type is '{}'", arch);
  return bind_moe_weights(*file.hf(), moe_hparams_from_config(file.hf()->config()), name_style::hf,
                          be);
}

}  // namespace tf::families::qwen
