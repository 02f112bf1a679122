#pragma once
/// Binds GLM-4 dense weights and hyper-parameters from an open tf::model::model_file.
#include <families/glm/glm4_config.hpp>
#include <families/glm/glm4_weights.hpp>
#include <tf/model/model_file.hpp>

namespace tf::families::glm {

/// The weights of `file`, which must outlive them (matrices point into its mapping).
inline glm4_weights load_weights(model::model_file const& file) {
  if (auto const* g = file.gguf()) return bind_weights(*g, hparams_from_gguf(*g), name_style::gguf);
  auto arch = file.architecture();
  if (arch != "glm4") throw error("tf: expected a glm4 config.json, model_type is '{}'", arch);
  return bind_weights(*file.hf(), hparams_from_config(file.hf()->config()), name_style::hf);
}

}  // namespace tf::families::glm
