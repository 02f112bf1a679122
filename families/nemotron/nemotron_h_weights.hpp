#pragma once
/// Nemotron-H weights bound from a model file to a backend: matrices as the file holds them (any
/// GGUF type, or F32/F16/BF16 safetensors); norms, biases, the Mamba2 per-head vectors and the
/// router's correction bias in f32. HF stores A_log, GGUF ssm_a = -exp(A_log): both bind as a.
#include <families/common/experts.hpp>
#include <families/common/tensor_binder.hpp>
#include <families/nemotron/nemotron_h_config.hpp>
#include <families/nemotron/nemotron_h_hparams.hpp>
#include <tf/error.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>
#include <tf/model/model_file.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::families::nemotron {

/// A Mamba2 mixer's weights; the biases are empty where the model has none.
template <class B>
struct mamba_weights {
  typename B::matrix in, out;            // in_proj [z | xBC | dt, hidden], out_proj
  typename B::vector in_bias, out_bias;  // optional
  typename B::vector conv, conv_bias;    // conv [conv_dim, K], its optional bias [conv_dim]
  typename B::vector dt_bias, a, d;      // per head; a = -exp(A_log)
  typename B::vector norm;               // the gated grouped RMSNorm's weights [d_inner]
};

/// One block: its norm and the weights of its kind of mixer (the others stay empty).
template <class B>
struct nemotron_h_layer_weights {
  block_kind kind = block_kind::mamba;
  typename B::vector norm;
  mamba_weights<B> mamba;
  layers::attention_weights<B> attn;
  typename B::vector attn_out_bias;       // optional
  layers::mlp_weights<B> mlp;             // up and down (relu², no gate)
  typename B::vector up_bias, down_bias;  // optional
  layers::moe_weights<B> moe;             // experts and shared expert without a gate
};

/// All of a Nemotron-H model's weights; matrices may point into the file, which must outlive them.
template <class B>
struct nemotron_h_weights {
  nemotron_h_hparams hp;
  typename B::matrix embd, output;  // output: the embedding when tied
  typename B::vector output_norm;
  std::vector<nemotron_h_layer_weights<B>> layers;
};

using families::name_style;
using families::tensor_binder;

/// An HF file whose tensors are named `model.` (as transformers 5 loads them) or `backbone.` (as
/// the checkpoints are): the map's `backbone.` names find either.
template <class File>
struct hf_prefixed {
  File const& file;
  std::string prefix;
  auto const* find_tensor(std::string_view name) const {
    if (prefix == "backbone." || !name.starts_with("backbone.")) return file.find_tensor(name);
    return file.find_tensor(prefix + std::string(name.substr(9)));
  }
};

/// transformers 5's stacked experts (no gate: `gate_up` names the up stack).
inline constexpr fused_expert_names nemotron_h_fused_experts{
    "backbone.layers.{}.mixer.experts.up_proj", "backbone.layers.{}.mixer.experts.down_proj"};

/// Throws unless `hp` describes a model tf can run.
inline void check_hparams(nemotron_h_hparams const& hp) {
  auto fail = [&](char const* what) {
    throw error("tf: nemotron_h hparams are inconsistent: {} (hidden {}, layers {})", what,
                hp.hidden_size, hp.num_layers());
  };
  if (hp.vocab_size <= 0 || hp.hidden_size <= 0 || hp.layers.empty()) fail("empty model");
  if (hp.count(block_kind::attention) > 0 &&
      (hp.num_heads <= 0 || hp.num_kv_heads <= 0 || hp.head_dim <= 0 ||
       hp.num_heads % hp.num_kv_heads != 0))
    fail("attention heads");
  if (hp.count(block_kind::mamba) > 0 &&
      (hp.mamba_num_heads <= 0 || hp.mamba_head_dim <= 0 || hp.ssm_state_size <= 0 ||
       hp.mamba_n_groups <= 0 || hp.mamba_num_heads % hp.mamba_n_groups != 0 ||
       hp.mamba_d_conv < 1 || hp.mamba_d_conv > 16))
    fail("Mamba2 heads, groups or conv kernel");
  if (hp.count(block_kind::mlp) > 0 && hp.intermediate_size <= 0) fail("MLP size");
  if (hp.count(block_kind::moe) > 0 &&
      (hp.n_routed_experts <= 0 || hp.num_experts_per_tok <= 0 ||
       hp.num_experts_per_tok > hp.n_routed_experts || hp.moe_intermediate_size <= 0 ||
       hp.n_group <= 0 || hp.n_routed_experts % hp.n_group != 0 || hp.topk_group <= 0 ||
       hp.topk_group > hp.n_group ||
       hp.num_experts_per_tok > hp.topk_group * (hp.n_routed_experts / hp.n_group)))
    fail("experts, top-k or groups");
  if (hp.moe_latent_size < 0) fail("latent size");
}

/// `hp` with the heads and widths one rank of `r` holds: attention heads and KV heads, the MLP's
/// and experts' widths, and the Mamba2 heads with their groups (a rank's heads read only its
/// groups, so the gated norm's groups stay whole on one rank).
inline nemotron_h_hparams per_rank(nemotron_h_hparams hp, dist::tensor_parallel const& r) {
  if (!r.split()) return hp;
  char const* family = "nemotron_h";
  if (hp.count(block_kind::attention) > 0) {
    hp.num_heads = dist::split_evenly(hp.num_heads, r.size, family, "attention heads");
    hp.num_kv_heads = dist::split_kv_heads(hp.num_kv_heads, r.size, family);
  }
  if (hp.count(block_kind::mlp) > 0)
    hp.intermediate_size = dist::split_evenly(hp.intermediate_size, r.size, family, "FFN columns");
  if (hp.count(block_kind::mamba) > 0) {
    hp.mamba_num_heads = dist::split_evenly(hp.mamba_num_heads, r.size, family, "Mamba2 heads");
    hp.mamba_n_groups = dist::split_evenly(hp.mamba_n_groups, r.size, family, "Mamba2 groups");
  }
  if (hp.count(block_kind::moe) > 0) {
    hp.moe_intermediate_size =
        dist::split_evenly(hp.moe_intermediate_size, r.size, family, "expert FFN columns");
    hp.moe_shared_expert_intermediate_size = dist::split_evenly(
        hp.moe_shared_expert_intermediate_size, r.size, family, "shared expert FFN columns");
  }
  return hp;
}

/// A Mamba2 layer's features this rank holds (`hp` the whole model's): its heads, their inner
/// features, its groups' B and C, as runs of in_proj's rows [z | x | B | C | dt] and of the conv's
/// channels [x | B | C].
struct mamba_runs {
  std::vector<index_run> heads, inner, in_proj, conv;
};

inline mamba_runs mamba_runs_of(nemotron_h_hparams const& hp, dist::tensor_parallel const& r) {
  std::int64_t const inner = hp.d_inner(), bc = std::int64_t{hp.mamba_n_groups} * hp.ssm_state_size;
  std::vector<std::int64_t> const heads{hp.mamba_num_heads}, groups{hp.mamba_n_groups};
  mamba_runs m;
  m.heads = rank_runs(heads, r, "nemotron_h", "Mamba2 heads");
  auto const g = rank_runs(groups, r, "nemotron_h", "Mamba2 groups");
  m.inner = features_of(m.heads, hp.mamba_head_dim);
  auto const b = features_of(g, hp.ssm_state_size, inner),
             c = features_of(g, hp.ssm_state_size, inner + bc);
  m.conv = joined({m.inner, b, c});
  m.in_proj =
      joined({m.inner, features_of(m.conv, 1, inner), features_of(m.heads, 1, 2 * inner + 2 * bc)});
  return m;
}

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names. Throws tf::error on a missing tensor or a shape that disagrees
/// with `hp`. Under tensor parallelism each rank binds its share of the attention and Mamba2
/// heads and of the MLP's and experts' widths.
template <class File, class B>
nemotron_h_weights<B> bind_weights(File const& file, nemotron_h_hparams const& hp, name_style style,
                                   B& be) {
  check_hparams(hp);
  using model::tensor_role;
  tensor_binder<File, decltype(nemotron_h_tensors), B> const b{file, nemotron_h_tensors, style,
                                                               "nemotron_h", be};
  bool const gguf = style == name_style::gguf;
  // An optional bias by its GGUF and HF names ({} = layer): this rank's `n` elements of a
  // column-parallel output (a rank's slice where the file holds more), or an empty vector.
  auto bias = [&](char const* gguf_name, char const* hf_name, int i, std::int64_t n) {
    auto const* t = file.find_tensor(model::expand(gguf ? gguf_name : hf_name, i));
    if (!t) return typename B::vector{};
    index_run run{0, n};
    if (auto first = slice_start(t->elements(), n, b.ranks()))
      run.first = *first;
    else if (t->elements() != n)
      throw error("tf: nemotron_h tensor {} has {} elements, expected {}", t->name, t->elements(),
                  n);
    return be.upload(b.floats_at(t, t->elements(), std::span(&run, 1)));
  };
  auto const rp = per_rank(hp, b.ranks());
  auto const mr = mamba_runs_of(hp, b.ranks());
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, nh = hp.mamba_num_heads;
  std::int64_t const q_out = hd * rp.num_heads, kv_out = hd * rp.num_kv_heads;
  std::int64_t const inner = hp.d_inner(), conv = hp.conv_dim();
  nemotron_h_weights<B> w;
  w.hp = rp;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  // Tied: the embedding (whole for the lookups; the head may take a rank's rows of it).
  w.output = out ? b.vocab_head(out, hp.vocab_size, h) : b.vocab_split(w.embd);
  w.output_norm = b.vec(tensor_role::output_norm, 0, h);
  for (int i = 0; i < hp.num_layers(); ++i) {
    auto& l = w.layers.emplace_back();
    l.kind = hp.layers[static_cast<std::size_t>(i)];
    l.norm = b.vec(tensor_role::attn_norm, i, h);
    switch (l.kind) {
      case block_kind::mamba: {
        auto& m = l.mamba;
        // This rank's heads, their groups, and their rows, channels and columns.
        auto vec = [&](tensor_role role, std::int64_t n, std::span<index_run const> runs,
                       std::int64_t width = 1) {
          return b.floats_at(b.find(role, i, false), n, runs, width);
        };
        m.in = b.rows_at(b.find(tensor_role::ssm_in, i, false), hp.in_proj_size(), h, mr.in_proj);
        m.out = b.columns_at(b.find(tensor_role::ssm_out, i, false), h, inner, mr.inner);
        if (auto const* t = file.find_tensor(model::expand(
                gguf ? "blk.{}.ssm_in.bias" : "backbone.layers.{}.mixer.in_proj.bias", i)))
          m.in_bias = be.upload(b.floats_at(t, hp.in_proj_size(), mr.in_proj));
        m.out_bias = bias("blk.{}.ssm_out.bias", "backbone.layers.{}.mixer.out_proj.bias", i, h);
        m.conv = be.upload(vec(tensor_role::ssm_conv1d, conv, mr.conv, hp.mamba_d_conv));
        if (b.find(tensor_role::ssm_conv1d_bias, i, true))
          m.conv_bias = be.upload(vec(tensor_role::ssm_conv1d_bias, conv, mr.conv));
        m.dt_bias = be.upload(vec(tensor_role::ssm_dt_bias, nh, mr.heads));
        m.d = be.upload(vec(tensor_role::ssm_d, nh, mr.heads));
        m.norm = be.upload(vec(tensor_role::ssm_norm, inner, mr.inner));
        // HF keeps A_log; GGUF keeps A.
        auto a = vec(tensor_role::ssm_a, nh, mr.heads);
        if (!gguf)
          for (auto& x : a) x = -std::exp(x);
        m.a = be.upload(std::move(a));
        break;
      }
      case block_kind::attention:
        l.attn.q = b.mat(tensor_role::attn_q, i, q_out, h);
        l.attn.k = b.mat(tensor_role::attn_k, i, kv_out, h);
        l.attn.v = b.mat(tensor_role::attn_v, i, kv_out, h);
        l.attn.o = b.mat(tensor_role::attn_output, i, h, q_out);
        l.attn.q_bias =
            bias("blk.{}.attn_q.bias", "backbone.layers.{}.mixer.q_proj.bias", i, q_out);
        l.attn.k_bias =
            bias("blk.{}.attn_k.bias", "backbone.layers.{}.mixer.k_proj.bias", i, kv_out);
        l.attn.v_bias =
            bias("blk.{}.attn_v.bias", "backbone.layers.{}.mixer.v_proj.bias", i, kv_out);
        l.attn_out_bias =
            bias("blk.{}.attn_output.bias", "backbone.layers.{}.mixer.o_proj.bias", i, h);
        break;
      case block_kind::mlp: {
        std::int64_t const ff = rp.intermediate_size;
        l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
        l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
        l.up_bias = bias("blk.{}.ffn_up.bias", "backbone.layers.{}.mixer.up_proj.bias", i, ff);
        l.down_bias = bias("blk.{}.ffn_down.bias", "backbone.layers.{}.mixer.down_proj.bias", i, h);
        break;
      }
      case block_kind::moe: {
        std::int64_t const sff = rp.moe_shared_expert_intermediate_size;
        l.moe.router = b.mat(tensor_role::ffn_gate_inp, i, hp.n_routed_experts, h);
        l.moe.router_bias = b.vec(tensor_role::exp_probs_b, i, hp.n_routed_experts);
        if (sff > 0)
          l.moe.shared =
              typename B::expert{typename B::matrix{}, b.mat(tensor_role::ffn_up_shexp, i, sff, h),
                                 b.mat(tensor_role::ffn_down_shexp, i, h, sff)};
        // With latent projections the experts read and write moe_latent_size values.
        std::int64_t const width = hp.moe_latent_size > 0 ? hp.moe_latent_size : h;
        if (hp.moe_latent_size > 0) {
          l.moe.latent_down = b.mat(tensor_role::ffn_latent_down, i, width, h);
          l.moe.latent_up = b.mat(tensor_role::ffn_latent_up, i, h, width);
        }
        l.moe.experts = bind_experts(b, i, hp.n_routed_experts, rp.moe_intermediate_size, width,
                                     &nemotron_h_fused_experts);
        break;
      }
    }
  }
  return w;
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
nemotron_h_weights<B> load_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_weights(*g, hparams_from_gguf(*g), name_style::gguf, be);
  auto const hp = read_hparams(file);
  auto const& hf = *file.hf();
  hf_prefixed<model::hf_model> const named{
      hf, hf.find_tensor("backbone.embeddings.weight") ? "backbone." : "model."};
  return bind_weights(named, hp, name_style::hf, be);
}

}  // namespace tf::families::nemotron
