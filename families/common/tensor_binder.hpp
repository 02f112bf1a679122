#pragma once
/// Binds a model file's tensors by role through a family's tensor map (GGUF or HF names),
/// checking shapes: matrices stay in the file's mapping, vectors are copied to f32.
#include <families/common/cpu_ops.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tf::families {

/// Which column of the tensor map names the tensors.
enum class name_style { gguf, hf };

/// `file` is anything with `find_tensor(name) -> const tensor_view*`; `family` names the family
/// in the errors.
template <class File, class Map>
struct tensor_binder {
  File const& file;
  Map const& map;
  name_style style;
  char const* family;

  std::string name_of(model::tensor_role role, int layer) const {
    auto row = model::find_role(map, role);
    if (!row) throw error("tf: {} tensor map has no role {}", family, static_cast<int>(role));
    return model::expand(style == name_style::gguf ? row->gguf : row->hf, layer);
  }
  auto const* find(model::tensor_role role, int layer, bool optional) const {
    auto name = name_of(role, layer);
    auto const* t = file.find_tensor(name);
    if (!t && !optional) throw error("tf: {} model lacks the tensor {}", family, name);
    return t;
  }
  template <class T>
  cpu_ops::matrix mat_of(T const* t, std::int64_t rows, std::int64_t cols) const {
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
      throw error("tf: {} tensor {} has dims [{}], expected [{}, {}] (row length first)", family,
                  t->name, fmt::join(t->dims, ", "), cols, rows);
    cpu_ops::matrix m{t->type, rows, cols, t->data,
                      model::row_bytes(t->type, static_cast<std::uint64_t>(cols))};
    if (m.row_bytes * static_cast<std::uint64_t>(rows) > t->bytes)
      throw error("tf: {} tensor {} holds {} bytes, {} rows of {} need {}", family, t->name,
                  t->bytes, rows, m.row_bytes, m.row_bytes * static_cast<std::uint64_t>(rows));
    return m;
  }
  cpu_ops::matrix mat(model::tensor_role role, int layer, std::int64_t rows,
                      std::int64_t cols) const {
    return mat_of(find(role, layer, false), rows, cols);
  }
  /// mat_of for the embedding and the head: in the rows8 layout where cpu_ops::in_rows8 can
  /// regroup it (each token reads all of the head).
  template <class T>
  cpu_ops::matrix head_of(T const* t, std::int64_t rows, std::int64_t cols) const {
    return cpu_ops::in_rows8(file, *t, mat_of(t, rows, cols));
  }
  cpu_ops::matrix head(model::tensor_role role, std::int64_t rows, std::int64_t cols) const {
    return head_of(find(role, 0, false), rows, cols);
  }
  /// A norm's weights [n] in f32.
  std::vector<float> norm(model::tensor_role role, int layer, std::int64_t n) const {
    return floats(role, layer, n, "norm");
  }
  /// Any other vector (a bias, a norm where the family calls it a tensor) [n] in f32.
  std::vector<float> vec(model::tensor_role role, int layer, std::int64_t n) const {
    return floats(role, layer, n, "tensor");
  }

 private:
  std::vector<float> floats(model::tensor_role role, int layer, std::int64_t n,
                            char const* what) const {
    auto const* t = find(role, layer, false);
    if (t->elements() != n)
      throw error("tf: {} {} {} has {} elements, expected {}", family, what, t->name, t->elements(),
                  n);
    if (model::row_bytes(t->type, static_cast<std::uint64_t>(n)) > t->bytes)
      throw error("tf: {} {} {} holds only {} bytes", family, what, t->name, t->bytes);
    std::vector<float> w(static_cast<std::size_t>(n));
    kernels::cpu::dequantize_row(t->type, t->data, w.data(), n);
    return w;
  }
};

}  // namespace tf::families
