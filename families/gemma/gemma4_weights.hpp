#pragma once
/// Gemma 4 weights bound from a GGUF or HF model file to a backend: matrices as the file holds
/// them, norms in f32 as stored (Gemma 4's RMSNorm has no +1 shift), each layer's layer_scalar on
/// the host. KV-shared layers have no k/v projections; K=V full layers have no v_proj.
#include <families/common/experts.hpp>
#include <families/common/tensor_binder.hpp>
#include <families/gemma/gemma3_hparams.hpp>
#include <families/gemma/gemma4_config.hpp>
#include <families/gemma/gemma4_hparams.hpp>
#include <kernels/cpu/dequant.hpp>
#include <tf/error.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>
#include <tf/model/model_file.hpp>
#include <tf/model/tensor_names.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tf::families::gemma {

using model::tensor_role;
// Gemma 4 names its shared roles as Gemma 3 does, in GGUF and in HF.
inline constexpr auto const& gemma4_tensors = gemma3_tensors;

/// A tensor outside the shared roles, by its GGUF and HF names.
struct gemma4_name {
  std::string_view gguf, hf;
};

/// The layer scalar (a one-element tensor tf reads on the host).
inline constexpr gemma4_name gemma4_layer_scalar{"blk.{}.layer_output_scale.weight",
                                                 "model.layers.{}.layer_scalar"};

/// The per-layer embedding's tensors (E models).
struct gemma4_ple_names {
  static constexpr gemma4_name embd{"per_layer_token_embd.weight",
                                    "model.embed_tokens_per_layer.weight"};
  static constexpr gemma4_name proj{"per_layer_model_proj.weight",
                                    "model.per_layer_model_projection.weight"};
  static constexpr gemma4_name proj_norm{"per_layer_proj_norm.weight",
                                         "model.per_layer_projection_norm.weight"};
  static constexpr gemma4_name gate{"blk.{}.inp_gate.weight",
                                    "model.layers.{}.per_layer_input_gate.weight"};
  static constexpr gemma4_name up{"blk.{}.proj.weight",
                                  "model.layers.{}.per_layer_projection.weight"};
  static constexpr gemma4_name post_norm{"blk.{}.post_norm.weight",
                                         "model.layers.{}.post_per_layer_input_norm.weight"};
};

/// The MoE block's tensors. GGUF keeps the experts stacked as gate|up and down (or gate and up
/// apart), router.scale as ffn_gate_inp.scale and per_expert_scale as ffn_down_exps.scale.
struct gemma4_moe_names {
  static constexpr gemma4_name router{"blk.{}.ffn_gate_inp.weight",
                                      "model.layers.{}.router.proj.weight"};
  static constexpr gemma4_name router_scale{"blk.{}.ffn_gate_inp.scale",
                                            "model.layers.{}.router.scale"};
  static constexpr gemma4_name expert_scale{"blk.{}.ffn_down_exps.scale",
                                            "model.layers.{}.router.per_expert_scale"};
  static constexpr gemma4_name gate_up{"blk.{}.ffn_gate_up_exps.weight",
                                       "model.layers.{}.experts.gate_up_proj"};
  static constexpr gemma4_name gate{"blk.{}.ffn_gate_exps.weight", ""};
  static constexpr gemma4_name up{"blk.{}.ffn_up_exps.weight", ""};
  static constexpr gemma4_name down{"blk.{}.ffn_down_exps.weight",
                                    "model.layers.{}.experts.down_proj"};
  static constexpr gemma4_name pre_norm_2{"blk.{}.pre_ffw_norm_2.weight",
                                          "model.layers.{}.pre_feedforward_layernorm_2.weight"};
  static constexpr gemma4_name post_norm_1{"blk.{}.post_ffw_norm_1.weight",
                                           "model.layers.{}.post_feedforward_layernorm_1.weight"};
  static constexpr gemma4_name post_norm_2{"blk.{}.post_ffw_norm_2.weight",
                                           "model.layers.{}.post_feedforward_layernorm_2.weight"};
};

/// One decoder layer's weights on backend B.
template <class B>
struct gemma4_layer_weights {
  typename B::vector attn_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  layers::attention_weights<B> attn;  // k, v, k_norm empty on a KV-shared layer; v on K=V
  typename B::vector v_norm;          // ones: V's RMSNorm has no weight
  layers::mlp_weights<B> mlp;
  float layer_scalar = 1.0f;
  // Per-layer embedding (E models): gate [ple, hidden], up [hidden, ple], post norm [hidden].
  typename B::matrix ple_gate, ple_up;
  typename B::vector ple_post_norm;
  // MoE block (beside the dense MLP): the experts read pre_norm_2(x); the router reads
  // rmsnorm(x) * router.scale / sqrt(hidden), folded into its columns over pre_norm_2's weights;
  // each pick's routed weight is times its expert's per_expert_scale (the routing's factors).
  layers::moe_weights<B> moe;
  typename B::vector pre_norm_2, post_norm_1, post_norm_2;
  std::vector<float> expert_scale;  // [experts], on the host: routing reads it
};

/// All of a Gemma 4 model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct gemma4_weights {
  gemma4_hparams hp;
  typename B::matrix embd;    // [vocab, hidden]
  typename B::matrix output;  // [vocab, hidden]; the embedding when tied
  typename B::vector output_norm;
  // Per-layer embedding (E models): embedding [ple_vocab, layers * ple], the projection of the
  // main embedding [layers * ple, hidden] and its norm [ple].
  typename B::matrix ple_embd, ple_proj;
  typename B::vector ple_proj_norm;
  std::vector<gemma4_layer_weights<B>> layers;
  /// Rows computed at load (the folded router), kept where the backend's matrices point at host
  /// memory.
  std::vector<std::shared_ptr<std::vector<float> const>> host_rows;
};

/// An HF model under Gemma4ForCausalLM's names: the multimodal wrapper keeps the text model's
/// tensors at model.language_model.* where the text model has model.*.
template <class File>
struct gemma4_hf_view {
  File const& file;
  bool wrapped = false;
  model::tensor_view const* find_tensor(std::string_view name) const {
    if (!wrapped || !name.starts_with("model.")) return file.find_tensor(name);
    return file.find_tensor("model.language_model." + std::string(name.substr(6)));
  }
};

/// `hp` with the attention heads, both kinds of KV heads and every layer's MLP width one rank of
/// `r` holds; the experts and the per-layer embeddings stay whole on every rank (replicated).
inline gemma4_hparams gemma4_per_rank(gemma4_hparams hp, dist::tensor_parallel const& r) {
  if (!r.split()) return hp;
  int const global_kv = hp.num_global_kv_heads;
  hp = per_rank(hp, r, "gemma4");  // heads, the sliding layers' KV heads, intermediate_size
  hp.num_global_kv_heads = dist::split_kv_heads(global_kv, r.size, "gemma4");
  for (auto& width : hp.ffn_widths)
    width = dist::split_evenly(width, r.size, "gemma4", "FFN columns");
  return hp;
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names. Throws tf::error on a missing tensor or a shape that disagrees
/// with `hp`.
template <class File, class B>
gemma4_weights<B> bind_gemma4_weights(File const& file, gemma4_hparams const& hp, name_style style,
                                      B& be) {
  if (hp.num_heads <= 0 || hp.num_kv_heads <= 0 || hp.num_global_kv_heads <= 0 ||
      hp.num_heads % hp.num_kv_heads != 0 || hp.num_heads % hp.num_global_kv_heads != 0 ||
      hp.head_dim <= 0 || hp.head_dim % 2 != 0 || hp.global_head_dim <= 0 ||
      hp.global_head_dim % 2 != 0 || hp.hidden_size <= 0 || hp.num_layers <= 0 ||
      hp.vocab_size <= 0 || hp.intermediate_size <= 0 || hp.num_kv_shared_layers < 0 ||
      hp.num_kv_shared_layers >= hp.num_layers)
    throw error(
        "tf: gemma4 hparams are inconsistent: heads {} kv_heads {}/{} head_dim {}/{} hidden {} "
        "layers {} (kv-shared {}) vocab {} ffn {}",
        hp.num_heads, hp.num_kv_heads, hp.num_global_kv_heads, hp.head_dim, hp.global_head_dim,
        hp.hidden_size, hp.num_layers, hp.num_kv_shared_layers, hp.vocab_size,
        hp.intermediate_size);
  if (hp.moe && (hp.num_experts <= 0 || hp.top_k_experts <= 0 ||
                 hp.top_k_experts > hp.num_experts || hp.moe_intermediate_size <= 0))
    throw error("tf: gemma4 MoE of {} experts, top {}, width {}", hp.num_experts, hp.top_k_experts,
                hp.moe_intermediate_size);
  for (int l = hp.first_shared_layer(); l < hp.num_layers; ++l)
    if (hp.kv_source(l) < 0)
      throw error("tf: gemma4 KV-shared layer {} has no earlier layer of its kind to read", l);
  tensor_binder<File, std::remove_reference_t<decltype(gemma4_tensors)>, B> const b{
      file, gemma4_tensors, style, "gemma4", be};
  std::int64_t const h = hp.hidden_size;
  gemma4_weights<B> w;
  w.hp = gemma4_per_rank(hp, b.ranks());
  auto const& mine = w.hp;  // this rank's heads and widths
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  // Tied: the embedding (whole for the lookups; the head may take a rank's rows of it).
  w.output = out ? b.vocab_head(out, hp.vocab_size, h) : b.vocab_split(w.embd);
  w.output_norm = b.norm(tensor_role::output_norm, 0, h);
  auto named = [&](gemma4_name n, int layer) {
    auto const name = model::expand(style == name_style::gguf ? n.gguf : n.hf, layer);
    auto const* t = file.find_tensor(name);
    if (!t) throw error("tf: gemma4 model lacks the tensor {}", name);
    return t;
  };
  auto named_vec = [&](gemma4_name name, int layer, std::int64_t n) {
    auto const* t = named(name, layer);
    if (t->elements() != n)
      throw error("tf: gemma4 {} has {} elements, expected {}", t->name, t->elements(), n);
    std::vector<float> v(static_cast<std::size_t>(n));
    kernels::cpu::dequantize_row(t->type, t->data, v.data(), n);
    return be.upload(std::move(v));
  };
  std::int64_t const ple = hp.ple_dim, ple_all = ple * hp.num_layers;
  // Rows of f32 computed here, owned by the weights.
  auto owned = [&](std::vector<float> v, std::int64_t rows, std::int64_t cols) {
    auto const& kept =
        *w.host_rows.emplace_back(std::make_shared<std::vector<float> const>(std::move(v)));
    return be.upload(backend::host_matrix{model::tensor_type::f32, rows, cols,
                                          reinterpret_cast<std::byte const*>(kept.data()),
                                          static_cast<std::uint64_t>(cols) * 4});
  };
  auto floats_of = [&](backend::host_matrix const& m) {
    std::vector<float> v(static_cast<std::size_t>(m.rows * m.cols));
    for (std::int64_t r = 0; r < m.rows; ++r)
      kernels::cpu::dequantize_row(m.type, m.data + static_cast<std::uint64_t>(r) * m.row_bytes,
                                   v.data() + r * m.cols, m.cols);
    return v;
  };
  auto host_floats = [&](gemma4_name name, int layer, std::int64_t n) {
    auto const* t = named(name, layer);
    if (t->elements() != n)
      throw error("tf: gemma4 {} has {} elements, expected {}", t->name, t->elements(), n);
    std::vector<float> v(static_cast<std::size_t>(n));
    kernels::cpu::dequantize_row(t->type, t->data, v.data(), n);
    return v;
  };
  auto bind_moe = [&](int i, gemma4_layer_weights<B>& l) {
    using n = gemma4_moe_names;
    std::int64_t const E = hp.num_experts, ff = hp.moe_intermediate_size;
    l.pre_norm_2 = named_vec(n::pre_norm_2, i, h);
    l.post_norm_1 = named_vec(n::post_norm_1, i, h);
    l.post_norm_2 = named_vec(n::post_norm_2, i, h);
    auto const pre2 = host_floats(n::pre_norm_2, i, h);
    auto const scale = host_floats(n::router_scale, i, h);
    auto router = floats_of(b.host_of(named(n::router, i), E, h));
    float const root = 1.0f / std::sqrt(static_cast<float>(h));
    for (std::int64_t e = 0; e < E; ++e)
      for (std::int64_t j = 0; j < h; ++j) {
        auto const at = static_cast<std::size_t>(j);
        if (pre2[at] == 0.0f)
          throw error("tf: gemma4 layer {} pre_feedforward_layernorm_2 has a zero weight", i);
        router[static_cast<std::size_t>(e * h + j)] *= scale[at] * root / pre2[at];
      }
    l.moe.router = owned(std::move(router), E, h);
    l.expert_scale = host_floats(n::expert_scale, i, E);
    auto const down = stacked_experts(*named(n::down, i), h, ff, E);
    auto const gate_up_name =
        model::expand(style == name_style::gguf ? n::gate_up.gguf : n::gate_up.hf, i);
    if (auto const* gu = file.find_tensor(gate_up_name)) {
      auto const both = stacked_experts(*gu, 2 * ff, h, E);
      for (std::size_t e = 0; e < both.size(); ++e)
        l.moe.experts.push_back({be.upload(row_slice(both[e], 0, ff)),
                                 be.upload(row_slice(both[e], ff, ff)), be.upload(down[e])});
      return;
    }
    if (style != name_style::gguf)
      throw error("tf: gemma4 model lacks the tensor {}", gate_up_name);
    auto const gate = stacked_experts(*named(n::gate, i), ff, h, E);
    auto const up = stacked_experts(*named(n::up, i), ff, h, E);
    for (std::size_t e = 0; e < gate.size(); ++e)
      l.moe.experts.push_back({be.upload(gate[e]), be.upload(up[e]), be.upload(down[e])});
  };
  if (ple > 0) {
    using n = gemma4_ple_names;
    w.ple_embd = b.head_of(named(n::embd, 0), hp.ple_vocab, ple_all);
    w.ple_proj = be.upload(b.host_of(named(n::proj, 0), ple_all, h));
    w.ple_proj_norm = named_vec(n::proj_norm, 0, ple);
  }
  for (int i = 0; i < hp.num_layers; ++i) {
    std::int64_t const hd = hp.layer_head_dim(i), ff = mine.ffn_size(i);
    std::int64_t const q_out = hd * mine.num_heads, kv_out = hd * mine.layer_kv_heads(i);
    auto& l = w.layers.emplace_back();
    l.attn_norm = b.norm(tensor_role::attn_norm, i, h);
    l.post_attn_norm = b.norm(tensor_role::post_attention_norm, i, h);
    l.ffn_norm = b.norm(tensor_role::ffn_norm, i, h);
    l.post_ffw_norm = b.norm(tensor_role::post_ffw_norm, i, h);
    l.attn.q_norm = b.norm(tensor_role::attn_q_norm, i, hd);
    l.attn.q = b.mat(tensor_role::attn_q, i, q_out, h);
    l.attn.o = b.mat(tensor_role::attn_output, i, h, q_out);
    if (!hp.is_kv_shared(i)) {
      l.attn.k_norm = b.norm(tensor_role::attn_k_norm, i, hd);
      l.attn.k = b.mat(tensor_role::attn_k, i, kv_out, h);
      if (!hp.v_from_k(i)) l.attn.v = b.mat(tensor_role::attn_v, i, kv_out, h);
      l.v_norm = be.upload(std::vector<float>(static_cast<std::size_t>(hd), 1.0f));
    }
    l.mlp.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
    l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
    l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
    if (ple > 0) {
      using n = gemma4_ple_names;
      l.ple_gate = be.upload(b.host_of(named(n::gate, i), ple, h));
      l.ple_up = be.upload(b.host_of(named(n::up, i), h, ple));
      l.ple_post_norm = named_vec(n::post_norm, i, h);
    }
    if (hp.moe) bind_moe(i, l);
    auto const scalar =
        style == name_style::gguf ? gemma4_layer_scalar.gguf : gemma4_layer_scalar.hf;
    if (auto const* s = file.find_tensor(model::expand(scalar, i))) {
      if (s->elements() != 1) throw error("tf: gemma4 {} has {} elements", s->name, s->elements());
      kernels::cpu::dequantize_row(s->type, s->data, &l.layer_scalar, 1);
    }
  }
  return w;
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
gemma4_weights<B> load_gemma4_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_gemma4_weights(*g, gemma4_hparams_from_gguf(*g), name_style::gguf, be);
  auto const hp = gemma4_hparams_from_config(file.hf()->config());
  auto const arch = file.architecture();
  if (arch != "gemma4_text" && arch != "gemma4")
    throw error("tf: expected a gemma4 config.json, model_type is '{}'", arch);
  auto const& hf = *file.hf();
  gemma4_hf_view<model::hf_model> const view{
      hf, hf.find_tensor("model.language_model.embed_tokens.weight") != nullptr};
  return bind_gemma4_weights(view, hp, name_style::hf, be);
}

}  // namespace tf::families::gemma
