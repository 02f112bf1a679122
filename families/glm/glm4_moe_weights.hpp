#pragma once
/// GLM-4.5 MoE weights bound from a model file: matrices stay in the file's mapping (any GGUF
/// type, or F32/F16/BF16 safetensors); norms, biases and the router's correction bias are f32.
#include <families/glm/detail/cpu_ops.hpp>
#include <families/glm/glm4_moe.hpp>
#include <families/glm/glm4_moe_config.hpp>
#include <families/glm/glm4_weights.hpp>
#include <tf/error.hpp>
#include <tf/model/model_file.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tf::families::glm {

using detail::matrix;

/// One decoder layer. Dense layers (index < first_k_dense_replace) use gate/up/down; MoE layers
/// use the router, the per-expert matrices and the shared expert.
struct glm4_moe_layer_weights {
  std::vector<float> attn_norm, ffn_norm;  // ffn_norm: HF post_attention_layernorm
  std::vector<float> q_norm, k_norm;       // [head_dim], empty without use_qk_norm
  std::vector<float> q_bias, k_bias, v_bias;
  matrix q, k, v, o;
  matrix gate, up, down;          // dense SwiGLU
  matrix router;                  // [experts, hidden]
  std::vector<float> score_bias;  // e_score_correction_bias [experts]
  std::vector<matrix> exp_gate, exp_up, exp_down;
  matrix sh_gate, sh_up, sh_down;
  bool moe = false;
};

struct glm4_moe_weights {
  glm4_moe_hparams hp;
  matrix embd, output;
  std::vector<float> output_norm;
  std::vector<glm4_moe_layer_weights> layers;
};

/// Binds GLM-4.5 weights from a GGUF (`gguf` true: blk.* names, stacked 3-D experts) or an HF
/// checkpoint (per-expert tensors as transformers saves them, or fused stacked gate_up_proj).
/// Throws tf::error on a missing tensor or a shape that disagrees with `hp`.
template <class File>
glm4_moe_weights bind_moe_weights(File const& file, glm4_moe_hparams const& hp, bool gguf) {
  auto find = [&](std::string const& name, bool optional) {
    auto const* t = file.find_tensor(name);
    if (!t && !optional) throw error("tf: glm4_moe model lacks the tensor {}", name);
    return t;
  };
  auto view = [&](auto const* t, std::int64_t rows, std::int64_t cols, std::int64_t slab,
                  std::int64_t slabs) {
    matrix m{t->type, rows, cols, t->data,
             model::row_bytes(t->type, static_cast<std::uint64_t>(cols))};
    std::uint64_t const need = m.row_bytes * static_cast<std::uint64_t>(rows * slabs);
    if (need > t->bytes)
      throw error("tf: glm4_moe tensor {} holds {} bytes, needs {}", t->name, t->bytes, need);
    m.data = t->data + static_cast<std::uint64_t>(slab * rows) * m.row_bytes;
    return m;
  };
  auto mat = [&](std::string const& name, std::int64_t rows, std::int64_t cols) {
    auto const* t = find(name, false);
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
      throw error("tf: glm4_moe tensor {} has dims [{}], expected [{}, {}] (row length first)",
                  name, fmt::join(t->dims, ", "), cols, rows);
    return view(t, rows, cols, 0, 1);
  };
  // Expert e's [rows, cols] matrix from a stacked [cols, rows_total, experts] tensor, at row
  // offset `first` (rows_total = rows for gate/up/down apart, 2 rows for fused gate_up).
  auto stacked = [&](std::string const& name, std::int64_t rows_total, std::int64_t cols) {
    auto const* t = find(name, false);
    if (t->dims.size() != 3 || t->dims[0] != cols || t->dims[1] != rows_total ||
        t->dims[2] != hp.num_experts)
      throw error("tf: glm4_moe tensor {} has dims [{}], expected [{}, {}, {}]", name,
                  fmt::join(t->dims, ", "), cols, rows_total, hp.num_experts);
    return t;
  };
  auto vec = [&](std::string const& name, std::int64_t n) {
    auto const* t = find(name, false);
    if (t->elements() != n)
      throw error("tf: glm4_moe tensor {} has {} elements, expected {}", name, t->elements(), n);
    if (model::row_bytes(t->type, static_cast<std::uint64_t>(n)) > t->bytes)
      throw error("tf: glm4_moe tensor {} holds only {} bytes", name, t->bytes);
    std::vector<float> w(static_cast<std::size_t>(n));
    kernels::cpu::dequantize_row(t->type, t->data, w.data(), n);
    return w;
  };
  if (!attention_hparams_ok(hp) || hp.moe_intermediate_size <= 0 || hp.num_experts <= 0 ||
      hp.experts_per_tok <= 0 || hp.experts_per_tok > hp.num_experts || hp.n_group <= 0 ||
      hp.num_experts % hp.n_group != 0 || hp.topk_group <= 0 || hp.topk_group > hp.n_group ||
      hp.first_k_dense_replace < 0 || hp.num_shared_experts < 0 ||
      hp.experts_per_tok > hp.topk_group * (hp.num_experts / hp.n_group))
    throw error(
        "tf: glm4_moe hparams are inconsistent: heads {} kv_heads {} head_dim {} rope_dims {} "
        "hidden {} layers {} experts {} used {} groups {}/{}",
        hp.num_heads, hp.num_kv_heads, hp.head_dim, hp.rope_dims, hp.hidden_size, hp.num_layers,
        hp.num_experts, hp.experts_per_tok, hp.topk_group, hp.n_group);
  std::int64_t const h = hp.hidden_size, hd = hp.head_dim, ff = hp.intermediate_size;
  std::int64_t const mff = hp.moe_intermediate_size, sff = mff * hp.num_shared_experts;
  std::int64_t const q_out = hd * hp.num_heads, kv_out = hd * hp.num_kv_heads;
  auto nm = [&](int i, char const* gg, char const* hf) {
    return gguf ? fmt::format("blk.{}.{}", i, gg) : fmt::format("model.layers.{}.{}", i, hf);
  };
  glm4_moe_weights w;
  w.hp = hp;
  w.embd = mat(gguf ? "token_embd.weight" : "model.embed_tokens.weight", hp.vocab_size, h);
  std::string const out_name = gguf ? "output.weight" : "lm_head.weight";
  w.output = find(out_name, true) ? mat(out_name, hp.vocab_size, h) : w.embd;
  w.output_norm = vec(gguf ? "output_norm.weight" : "model.norm.weight", h);
  for (int i = 0; i < hp.num_layers; ++i) {
    glm4_moe_layer_weights l;
    l.attn_norm = vec(nm(i, "attn_norm.weight", "input_layernorm.weight"), h);
    // The GGUF name trap: glm4moe's post_attention_norm is the pre-FFN norm.
    l.ffn_norm = vec(nm(i, "post_attention_norm.weight", "post_attention_layernorm.weight"), h);
    l.q = mat(nm(i, "attn_q.weight", "self_attn.q_proj.weight"), q_out, h);
    l.k = mat(nm(i, "attn_k.weight", "self_attn.k_proj.weight"), kv_out, h);
    l.v = mat(nm(i, "attn_v.weight", "self_attn.v_proj.weight"), kv_out, h);
    l.o = mat(nm(i, "attn_output.weight", "self_attn.o_proj.weight"), h, q_out);
    if (hp.attention_bias) {
      l.q_bias = vec(nm(i, "attn_q.bias", "self_attn.q_proj.bias"), q_out);
      l.k_bias = vec(nm(i, "attn_k.bias", "self_attn.k_proj.bias"), kv_out);
      l.v_bias = vec(nm(i, "attn_v.bias", "self_attn.v_proj.bias"), kv_out);
    }
    if (hp.use_qk_norm) {
      l.q_norm = vec(nm(i, "attn_q_norm.weight", "self_attn.q_norm.weight"), hd);
      l.k_norm = vec(nm(i, "attn_k_norm.weight", "self_attn.k_norm.weight"), hd);
    }
    l.moe = i >= hp.first_k_dense_replace;
    if (!l.moe) {
      l.gate = mat(nm(i, "ffn_gate.weight", "mlp.gate_proj.weight"), ff, h);
      l.up = mat(nm(i, "ffn_up.weight", "mlp.up_proj.weight"), ff, h);
      l.down = mat(nm(i, "ffn_down.weight", "mlp.down_proj.weight"), h, ff);
      w.layers.push_back(std::move(l));
      continue;
    }
    l.router = mat(nm(i, "ffn_gate_inp.weight", "mlp.gate.weight"), hp.num_experts, h);
    l.score_bias =
        vec(nm(i, "exp_probs_b.bias", "mlp.gate.e_score_correction_bias"), hp.num_experts);
    if (hp.num_shared_experts > 0) {
      l.sh_gate =
          mat(nm(i, "ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"), sff, h);
      l.sh_up = mat(nm(i, "ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"), sff, h);
      l.sh_down =
          mat(nm(i, "ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"), h, sff);
    }
    std::string const fused = nm(i, "", "mlp.experts.gate_up_proj");
    if (gguf) {
      auto const* g = stacked(nm(i, "ffn_gate_exps.weight", ""), mff, h);
      auto const* u = stacked(nm(i, "ffn_up_exps.weight", ""), mff, h);
      auto const* d = stacked(nm(i, "ffn_down_exps.weight", ""), h, mff);
      for (int e = 0; e < hp.num_experts; ++e) {
        l.exp_gate.push_back(view(g, mff, h, e, hp.num_experts));
        l.exp_up.push_back(view(u, mff, h, e, hp.num_experts));
        l.exp_down.push_back(view(d, h, mff, e, hp.num_experts));
      }
    } else if (find(fused, true)) {
      auto const* gu = stacked(fused, 2 * mff, h);
      auto const* d = stacked(nm(i, "", "mlp.experts.down_proj"), h, mff);
      for (int e = 0; e < hp.num_experts; ++e) {
        l.exp_gate.push_back(view(gu, mff, h, 2 * e, 2 * hp.num_experts));
        l.exp_up.push_back(view(gu, mff, h, 2 * e + 1, 2 * hp.num_experts));
        l.exp_down.push_back(view(d, h, mff, e, hp.num_experts));
      }
    } else {
      for (int e = 0; e < hp.num_experts; ++e) {
        auto ex = [&](char const* p) { return fmt::format("mlp.experts.{}.{}.weight", e, p); };
        l.exp_gate.push_back(mat(nm(i, "", ex("gate_proj").c_str()), mff, h));
        l.exp_up.push_back(mat(nm(i, "", ex("up_proj").c_str()), mff, h));
        l.exp_down.push_back(mat(nm(i, "", ex("down_proj").c_str()), h, mff));
      }
    }
    w.layers.push_back(std::move(l));
  }
  return w;
}

/// The weights of `file`, which must outlive them (matrices point into its mapping).
inline glm4_moe_weights load_moe_weights(model::model_file const& file) {
  if (auto const* g = file.gguf()) return bind_moe_weights(*g, moe_hparams_from_gguf(*g), true);
  auto arch = file.architecture();
  if (arch != "glm4_moe")
    throw error("tf: expected a glm4_moe config.json, model_type is '{}'", arch);
  return bind_moe_weights(*file.hf(), moe_hparams_from_config(file.hf()->config()), false);
}

}  // namespace tf::families::glm
