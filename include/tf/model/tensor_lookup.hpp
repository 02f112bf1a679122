#pragma once
/// Finds a family's tensor (by canonical role and layer) in a model file, under the file's names.
#include <tf/error.hpp>
#include <tf/model/model_file.hpp>
#include <tf/model/tensor_names.hpp>

#include <span>
#include <string>

namespace tf::model {

/// The file name of `row` for layer `layer` in `file`'s format (GGUF or HF); empty if none.
inline std::string file_tensor_name(const tensor_name& row, const model_file& file, int layer) {
  auto pattern = file.is_gguf() ? row.gguf : row.hf;
  if (pattern.empty()) return {};
  return expand(pattern, layer);
}

/// The tensor for `role` (layer `layer`, ignored for global tensors), or nullptr when the family's
/// map marks it optional and the file lacks it; throws when a required tensor is missing or the
/// family has no such role.
inline const tensor_view* find_tensor(std::span<const tensor_name> map, const model_file& file,
                                      tensor_role role, int layer = -1) {
  auto row = find_role(map, role);
  if (!row) throw error("tf: this family's tensor map has no role {}", role_name(role));
  if (row->per_layer && layer < 0)
    throw error("tf: tensor role {} is per layer, but no layer was given", role_name(role));
  auto name = file_tensor_name(*row, file, layer);
  if (name.empty()) {
    if (row->optional) return nullptr;
    throw error("tf: tensor role {} has no {} name in this family's map", role_name(role),
                file.is_gguf() ? "GGUF" : "Hugging Face");
  }
  auto t = file.find_tensor(name);
  if (!t && !row->optional)
    throw error("tf: the model ({}) has no tensor \"{}\" (role {}{})", file.architecture(), name,
                role_name(role), row->per_layer ? fmt::format(", layer {}", layer) : std::string());
  return t;
}

/// Like find_tensor, but an absent optional tensor throws too.
inline const tensor_view& require_tensor(std::span<const tensor_name> map, const model_file& file,
                                         tensor_role role, int layer = -1) {
  auto t = find_tensor(map, file, role, layer);
  if (!t) {
    auto row = find_role(map, role);
    throw error("tf: the model ({}) has no tensor \"{}\" (role {})", file.architecture(),
                file_tensor_name(*row, file, layer), role_name(role));
  }
  return *t;
}

}  // namespace tf::model
