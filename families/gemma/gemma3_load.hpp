#pragma once
/// Binds Gemma 3 weights and hyper-parameters from an open tf::model::model_file (GGUF or HF).
#include <families/gemma/gemma3_config.hpp>
#include <families/gemma/gemma3_weights.hpp>
#include <tf/model/model_file.hpp>

namespace tf::families::gemma {

/// The weights of `file`, which must outlive them (matrices point into its mapping).
inline gemma3_weights load_weights(model::model_file const& file) {
  if (auto const* g = file.gguf()) return bind_weights(*g, hparams_from_gguf(*g), name_style::gguf);
  auto const* hf = file.hf();
  auto hp = hparams_from_config(hf->config());
  auto arch = file.architecture();
  if (arch != "gemma3_text" && arch != "gemma3")
    throw error("tf: expected a gemma3_text config.json, model_type is '{}'", arch);
  return bind_weights(*hf, hp, name_style::hf);
}

}  // namespace tf::families::gemma
