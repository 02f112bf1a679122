#pragma once
/// Qwen3.5 weights bound from a model file to a backend: matrices as the file holds them; norms,
/// the conv kernel and the decay coefficients in f32. HF's zero-centred norms get their +1 here
/// (GGUF's have it baked in), and HF's A_log becomes -exp(A_log) (what GGUF's ssm_a holds).
/// qwen35_detail::bind_hybrid_weights is shared with Qwen3-Next, whose GDN input projections
/// differ (qwen3_next_weights.hpp).
#include <families/common/experts.hpp>
#include <families/common/tensor_binder.hpp>
#include <families/qwen/qwen35_config.hpp>
#include <families/qwen/qwen35_hparams.hpp>
#include <kernels/cpu/dequant.hpp>
#include <tf/error.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>
#include <tf/model/model_file.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace tf::families::qwen {

/// A gated full-attention layer: q [2 heads head_dim, hidden] gives each head its queries, then
/// its output gate; per-head q/k norms.
template <class B>
struct qwen35_attention_weights {
  typename B::matrix q, k, v, o;
  typename B::vector q_norm, k_norm;
};

/// A Gated DeltaNet layer: qkv [2 nk dk + nv dv, hidden], z [nv dv, hidden], b and a [nv,
/// hidden], out [hidden, nv dv]; conv [conv_dim, K], dt_bias and a_coef (-exp(A_log)) [nv], the
/// gated norm [dv].
template <class B>
struct qwen35_delta_weights {
  typename B::matrix qkv, z, b, a, out;
  typename B::vector conv, dt_bias, a_coef, norm;
};

/// One layer: its mixer (attention or GDN, by hp.layer_types) and its MLP (dense or routed).
template <class B>
struct qwen35_layer_weights {
  typename B::vector attn_norm, ffn_norm;
  qwen35_attention_weights<B> attn;
  qwen35_delta_weights<B> delta;
  layers::mlp_weights<B> mlp;
  layers::moe_weights<B> moe;
};

/// All of a Qwen3.5 model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct qwen35_weights {
  qwen35_hparams hp;
  typename B::matrix embd, output;
  typename B::vector output_norm;
  std::vector<qwen35_layer_weights<B>> layers;
};

/// An HF model seen under Qwen3_5ForCausalLM's names: a multimodal wrapper keeps the text model's
/// tensors at model.language_model.* where the text model has model.*.
template <class File>
struct qwen35_hf_view {
  File const& file;
  bool wrapped = false;
  model::tensor_view const* find_tensor(std::string_view name) const {
    if (!wrapped || !name.starts_with("model.")) return file.find_tensor(name);
    return file.find_tensor("model.language_model." + std::string(name.substr(6)));
  }
};

/// The Gated DeltaNet heads one rank holds: a run of key heads, and the value heads that read
/// them (grouped value heads are one run; tiled ones, head j reading k-head j % nk, are the
/// rank's slice of each block of nk). At one rank, all of them.
struct qwen35_delta_heads {
  std::vector<index_run> k, v;
};

inline qwen35_delta_heads qwen35_delta_heads_of(qwen35_hparams const& hp,
                                                dist::tensor_parallel const& r,
                                                char const* family) {
  std::int64_t const nk = hp.linear_num_key_heads, nv = hp.linear_num_value_heads;
  std::vector<std::int64_t> const keys{nk};
  std::vector<std::int64_t> const values = hp.tiled_v_heads && nk > 0 && nv != nk
                                               ? std::vector<std::int64_t>(nv / nk, nk)
                                               : std::vector<std::int64_t>{nv};
  return {rank_runs(keys, r, family, "linear-attention key heads"),
          rank_runs(values, r, family, "linear-attention value heads")};
}

/// `hp` with the heads and widths one rank of `r` holds: attention heads, KV heads, the MLP's
/// and experts' widths, and the Gated DeltaNet's key and value heads.
inline qwen35_hparams qwen35_per_rank(qwen35_hparams hp, dist::tensor_parallel const& r,
                                      char const* family) {
  if (!r.split()) return hp;
  hp = per_rank(hp, r, family);
  hp.linear_num_key_heads =
      dist::split_evenly(hp.linear_num_key_heads, r.size, family, "linear-attention key heads");
  hp.linear_num_value_heads =
      dist::split_evenly(hp.linear_num_value_heads, r.size, family, "linear-attention value heads");
  if (hp.is_moe()) {
    hp.moe_intermediate_size =
        dist::split_evenly(hp.moe_intermediate_size, r.size, family, "expert FFN columns");
    hp.shared_expert_intermediate_size = dist::split_evenly(
        hp.shared_expert_intermediate_size, r.size, family, "shared expert FFN columns");
  }
  return hp;
}

namespace qwen35_detail {

/// The rows of the fused [q | k | v] projection (and the conv's channels) of `heads`.
inline std::vector<index_run> qkv_runs(qwen35_hparams const& hp, qwen35_delta_heads const& heads) {
  std::int64_t const dk = hp.linear_key_head_dim, keys = hp.linear_num_key_heads * dk;
  return joined({features_of(heads.k, dk), features_of(heads.k, dk, keys),
                 features_of(heads.v, hp.linear_value_head_dim, 2 * keys)});
}

template <class Binder>
model::tensor_view const* find(Binder const& b, qwen35_name n, int layer, bool optional) {
  auto const name = model::expand(b.style == name_style::gguf ? n.gguf : n.hf, layer);
  auto const* t = b.file.find_tensor(name);
  if (!t && !optional) throw error("tf: {} model lacks the tensor {}", b.family, name);
  return t;
}

/// t's `n` elements in f32.
inline std::vector<float> floats(model::tensor_view const& t, std::int64_t n, char const* family) {
  if (t.elements() != n || model::row_bytes(t.type, static_cast<std::uint64_t>(n)) > t.bytes)
    throw error("tf: {} tensor {} has {} elements in {} bytes, expected {}", family, t.name,
                t.elements(), t.bytes, n);
  std::vector<float> w(static_cast<std::size_t>(n));
  kernels::cpu::dequantize_row(t.type, t.data, w.data(), n);
  return w;
}

/// A [1, cols] matrix from a tensor of `cols` elements (GGUF keeps the shared-expert gate 1-D).
template <class Binder>
auto row_matrix(Binder const& b, model::tensor_view const& t, std::int64_t cols) {
  auto const row = model::row_bytes(t.type, static_cast<std::uint64_t>(cols));
  if (t.dims.empty() || t.dims[0] != cols || t.elements() != cols || row > t.bytes)
    throw error("tf: {} tensor {} has {} elements, expected one row of {}", b.family, t.name,
                t.elements(), cols);
  return b.be.upload(backend::host_matrix{t.type, 1, cols, t.data, row});
}

template <class Layer, class Binder>
void bind_attention(Layer& l, Binder const& b, qwen35_hparams const& hp, int i, float shift) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  l.attn.q = b.mat(tensor_role::attn_q, i, 2 * q_out, h);
  l.attn.k = b.mat(tensor_role::attn_k, i, kv_out, h);
  l.attn.v = b.mat(tensor_role::attn_v, i, kv_out, h);
  l.attn.o = b.mat(tensor_role::attn_output, i, h, q_out);
  l.attn.q_norm = b.norm(tensor_role::attn_q_norm, i, hd, shift);
  l.attn.k_norm = b.norm(tensor_role::attn_k_norm, i, hd, shift);
}

/// Qwen3.5's GDN input projections, flat as the forward reads them: qkv, z, b and a, the rows
/// of this rank's `heads` (`hp` is the whole model's).
template <class Layer, class Binder>
void bind_flat_projections(Layer& l, Binder const& b, qwen35_hparams const& hp, int i,
                           qwen35_delta_heads const& heads) {
  std::int64_t const h = hp.hidden_size, nv = hp.linear_num_value_heads;
  std::int64_t const dv = hp.linear_value_head_dim;
  auto& d = l.delta;
  d.qkv = b.rows_at(b.find(model::tensor_role::ssm_in, i, false), hp.conv_dim(), h,
                    qkv_runs(hp, heads));
  d.z = b.rows_at(find(b, qwen35_in_proj_z, i, false), nv * dv, h, features_of(heads.v, dv));
  d.b = b.rows_at(find(b, qwen35_in_proj_b, i, false), nv, h, heads.v);
  d.a = b.rows_at(find(b, qwen35_in_proj_a, i, false), nv, h, heads.v);
}

/// The rest of a GDN layer: the output projection (this rank's value heads' input features), the
/// conv (its channels), the decay and the gated norm; `hp` is the whole model's.
template <class Layer, class Binder>
void bind_delta(Layer& l, Binder const& b, qwen35_hparams const& hp, int i,
                qwen35_delta_heads const& heads) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, nv = hp.linear_num_value_heads;
  std::int64_t const dv = hp.linear_value_head_dim;
  auto& d = l.delta;
  d.out =
      b.columns_at(b.find(tensor_role::ssm_out, i, false), h, nv * dv, features_of(heads.v, dv));
  auto const* k = b.find(tensor_role::ssm_conv1d, i, false);
  if (k->dims.empty() || k->dims[0] != hp.linear_conv_kernel_dim)
    throw error("tf: {} tensor {} has rows of {}, expected the conv kernel {}", b.family, k->name,
                k->dims.empty() ? 0 : k->dims[0], hp.linear_conv_kernel_dim);
  d.conv =
      b.be.upload(b.floats_at(k, hp.conv_dim(), qkv_runs(hp, heads), hp.linear_conv_kernel_dim));
  d.dt_bias = b.be.upload(b.floats_at(b.find(tensor_role::ssm_dt_bias, i, false), nv, heads.v));
  auto a = b.floats_at(b.find(tensor_role::ssm_a, i, false), nv, heads.v);
  if (b.style == name_style::hf)
    for (auto& x : a) x = -std::exp(x);
  d.a_coef = b.be.upload(std::move(a));
  d.norm = b.vec(tensor_role::ssm_norm, i, hp.linear_value_head_dim);
}

/// A routed layer; `hp` is this rank's (its expert widths), the experts sliced the
/// tensor-parallel way.
template <class Layer, class Binder>
void bind_moe(Layer& l, Binder const& b, qwen35_hparams const& hp, int i) {
  using model::tensor_role;
  using B = std::remove_reference_t<decltype(b.be)>;
  std::int64_t const h = hp.hidden_size, n = hp.num_experts, ff = hp.moe_intermediate_size;
  std::int64_t const sff = hp.shared_expert_intermediate_size;
  l.moe.router = b.mat(tensor_role::ffn_gate_inp, i, n, h);
  if (auto const* gu =
          b.style == name_style::gguf ? find(b, qwen35_gate_up_exps, i, true) : nullptr) {
    // The file's expert width: every rank's ff where the experts split.
    std::int64_t const file_ff = gu->dims.size() > 1 ? gu->dims[1] / 2 : ff;
    auto const both = stacked_experts(*gu, 2 * file_ff, h, n);
    auto const down = stacked_experts(*b.find(tensor_role::ffn_down_exps, i, false), h, file_ff, n);
    for (std::size_t e = 0; e < both.size(); ++e)
      l.moe.experts.push_back(typename B::expert{
          b.shard(tensor_role::ffn_gate_exps, row_slice(both[e], 0, file_ff), ff, h),
          b.shard(tensor_role::ffn_up_exps, row_slice(both[e], file_ff, file_ff), ff, h),
          b.shard(tensor_role::ffn_down_exps, down[e], h, ff)});
  } else {
    fused_expert_names const fused{qwen35_gate_up_exps.hf, qwen35_hf_down_exps};
    l.moe.experts = bind_experts(b, i, n, ff, h, &fused);
  }
  l.moe.shared = typename B::expert{b.mat(tensor_role::ffn_gate_shexp, i, sff, h),
                                    b.mat(tensor_role::ffn_up_shexp, i, sff, h),
                                    b.mat(tensor_role::ffn_down_shexp, i, h, sff)};
  l.moe.shared_gate = row_matrix(b, *find(b, qwen35_shared_gate, i, false), h);
}

/// Binds the weights of `file` to `be` as bind_qwen35_weights does, but for each GDN layer i
/// calls `projections(layer, binder, i, heads)` to bind its input projections (qkv, z, b, a)
/// for this rank's `heads`; `family` names the family in the errors. Under tensor parallelism
/// each rank binds its share of the attention and GDN heads and of the MLP's and experts' widths.
template <class File, class B, class Projections>
qwen35_weights<B> bind_hybrid_weights(File const& file, qwen35_hparams const& hp, name_style style,
                                      B& be, char const* family, Projections&& projections) {
  using model::tensor_role;
  check_qwen35_hparams(hp, family);
  tensor_binder<File, decltype(qwen35_tensors), B> const b{file, qwen35_tensors, style, family, be};
  float const shift = style == name_style::hf ? 1.0f : 0.0f;  // HF norms are (1 + w)
  std::int64_t const h = hp.hidden_size;
  qwen35_weights<B> w;
  w.hp = qwen35_per_rank(hp, b.ranks(), family);
  auto const heads = qwen35_delta_heads_of(hp, b.ranks(), family);
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* head = b.find(tensor_role::output, 0, true);
  if (!head && !hp.tie_word_embeddings)
    throw error("tf: {} model lacks the tensor {} and its embeddings are not tied", family,
                b.name_of(tensor_role::output, 0));
  w.output = head && !hp.tie_word_embeddings ? b.vocab_head(head, hp.vocab_size, h)
                                             : b.vocab_split(w.embd);
  w.output_norm = b.norm(tensor_role::output_norm, 0, h, shift);
  for (int i = 0; i < hp.num_layers; ++i) {
    auto& l = w.layers.emplace_back();
    l.attn_norm = b.norm(tensor_role::attn_norm, i, h, shift);
    l.ffn_norm = b.norm(tensor_role::ffn_norm, i, h, shift);
    if (hp.is_full_attention(i)) {
      bind_attention(l, b, w.hp, i, shift);
    } else {
      projections(l, b, i, heads);
      bind_delta(l, b, hp, i, heads);
    }
    if (hp.is_moe(i)) {
      bind_moe(l, b, w.hp, i);
    } else {
      std::int64_t const ff = w.hp.intermediate_size;
      l.mlp.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
      l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
      l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
    }
  }
  return w;
}

}  // namespace qwen35_detail

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names (and conventions). Throws tf::error on a missing tensor or a
/// shape that disagrees with `hp`.
template <class File, class B>
qwen35_weights<B> bind_qwen35_weights(File const& file, qwen35_hparams const& hp, name_style style,
                                      B& be) {
  return qwen35_detail::bind_hybrid_weights(
      file, hp, style, be, "qwen35", [&](auto& layer, auto const& b, int i, auto const& heads) {
        qwen35_detail::bind_flat_projections(layer, b, hp, i, heads);
      });
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
qwen35_weights<B> load_qwen35_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_qwen35_weights(*g, qwen35_hparams_from_gguf(*g), name_style::gguf, be);
  auto const& hf = *file.hf();
  qwen35_hf_view<model::hf_model> const view{
      hf, hf.find_tensor("model.language_model.embed_tokens.weight") != nullptr};
  return bind_qwen35_weights(view, qwen35_hparams_from_config(hf.config()), name_style::hf, be);
}

}  // namespace tf::families::qwen
