#pragma once
/// Binds Qwen3-MoE weights and hyper-parameters from an open tf::model::model_file (GGUF or HF).
#include <families/qwen/qwen3_moe_config.hpp>
#include <families/qwen/qwen3_moe_weights.hpp>
#include <tf/model/model_file.hpp>

namespace tf::families::qwen {

/// The weights of `file`, which must outlive them (matrices point into its mapping).
inline qwen3_moe_weights load_moe_weights(model::model_file const& file) {
  if (auto const* g = file.gguf())
    return bind_moe_weights(*g, moe_hparams_from_gguf(*g), name_style::gguf);
  auto const* hf = file.hf();
  auto arch = file.architecture();
  if (arch != "qwen3_moe")
    throw error("tf: expected a qwen3_moe config.json, model_type is '{}'", arch);
  return bind_moe_weights(*hf, moe_hparams_from_config(hf->config()), name_style::hf);
}

}  // namespace tf::families::qwen
