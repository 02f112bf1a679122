#pragma once
/// The canonical tensor-name vocabulary (one place), and a family's map from it to file names.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tf::model {

/// What a tensor is, independent of the file format that stores it.
enum class tensor_role : std::uint8_t {
  token_embd,
  output_norm,
  output,
  attn_norm,
  attn_q,
  attn_k,
  attn_v,
  attn_q_bias,
  attn_k_bias,
  attn_v_bias,
  attn_output,
  attn_q_norm,
  attn_k_norm,
  post_attention_norm,
  ffn_norm,
  ffn_gate,
  ffn_up,
  ffn_down,
  post_ffw_norm,
  ffn_gate_inp,
  ffn_gate_exps,
  ffn_up_exps,
  ffn_down_exps,
  ffn_gate_shexp,
  ffn_up_shexp,
  ffn_down_shexp,
  exp_probs_b,
  ssm_in,
  ssm_conv1d,
  ssm_conv1d_bias,
  ssm_dt_bias,
  ssm_a,
  ssm_d,
  ssm_norm,
  ssm_out,
  ffn_latent_down,
  ffn_latent_up,
};

/// The canonical name of a role ("attn_q", ...), for messages and listings.
constexpr std::string_view role_name(tensor_role r) {
  constexpr std::array<std::string_view, 37> names{"token_embd",    "output_norm",
                                                   "output",        "attn_norm",
                                                   "attn_q",        "attn_k",
                                                   "attn_v",        "attn_q_bias",
                                                   "attn_k_bias",   "attn_v_bias",
                                                   "attn_output",   "attn_q_norm",
                                                   "attn_k_norm",   "post_attention_norm",
                                                   "ffn_norm",      "ffn_gate",
                                                   "ffn_up",        "ffn_down",
                                                   "post_ffw_norm", "ffn_gate_inp",
                                                   "ffn_gate_exps", "ffn_up_exps",
                                                   "ffn_down_exps", "ffn_gate_shexp",
                                                   "ffn_up_shexp",  "ffn_down_shexp",
                                                   "exp_probs_b",   "ssm_in",
                                                   "ssm_conv1d",    "ssm_conv1d_bias",
                                                   "ssm_dt_bias",   "ssm_a",
                                                   "ssm_d",         "ssm_norm",
                                                   "ssm_out",       "ffn_latent_down",
                                                   "ffn_latent_up"};
  auto i = static_cast<std::size_t>(r);
  return i < names.size() ? names[i] : std::string_view("unknown");
}

/// One row of a family's tensor map. `{}` in a name is the layer index; global tensors have none.
struct tensor_name {
  tensor_role role;
  std::string_view gguf;  // e.g. "blk.{}.attn_q.weight"
  std::string_view hf;    // e.g. "model.layers.{}.self_attn.q_proj.weight"; empty if HF has none
  bool per_layer;
  bool optional;
};

/// The file name of `role` in layer `layer` under one format's pattern.
inline std::string expand(std::string_view pattern, int layer) {
  std::string out;
  auto at = pattern.find("{}");
  if (at == std::string_view::npos) return std::string(pattern);
  out.append(pattern.substr(0, at));
  out.append(std::to_string(layer));
  out.append(pattern.substr(at + 2));
  return out;
}

/// The row for `role` in a family's map, if the family has that tensor.
inline std::optional<tensor_name> find_role(std::span<tensor_name const> map, tensor_role role) {
  for (auto const& row : map)
    if (row.role == role) return row;
  return std::nullopt;
}

}  // namespace tf::model
