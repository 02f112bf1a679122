#pragma once
/// Binds a model file's tensors by role through a family's tensor map (GGUF or HF names), checking
/// shapes, and hands them to the backend: matrices as the file holds them, vectors in f32.
#include <kernels/cpu/dequant.hpp>
#include <tf/backend/cpu.hpp>
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
/// in the errors; `be` is the backend the weights are bound to.
template <class File, class Map, class B>
struct tensor_binder {
  File const& file;
  Map const& map;
  name_style style;
  char const* family;
  B& be;

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
  /// The host description of t as a [rows, cols] matrix.
  template <class T>
  backend::host_matrix host_of(T const* t, std::int64_t rows, std::int64_t cols) const {
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
      throw error("tf: {} tensor {} has dims [{}], expected [{}, {}] (row length first)", family,
                  t->name, fmt::join(t->dims, ", "), cols, rows);
    backend::host_matrix m{t->type, rows, cols, t->data,
                           model::row_bytes(t->type, static_cast<std::uint64_t>(cols))};
    if (m.row_bytes * static_cast<std::uint64_t>(rows) > t->bytes)
      throw error("tf: {} tensor {} holds {} bytes, {} rows of {} need {}", family, t->name,
                  t->bytes, rows, m.row_bytes, m.row_bytes * static_cast<std::uint64_t>(rows));
    return m;
  }
  auto mat(model::tensor_role role, int layer, std::int64_t rows, std::int64_t cols) const {
    return be.upload(host_of(find(role, layer, false), rows, cols));
  }
  /// The embedding or the head (each token reads all of it): the backend may lay it out for that.
  template <class T>
  auto head_of(T const* t, std::int64_t rows, std::int64_t cols) const {
    return be.upload_head(file, *t, host_of(t, rows, cols));
  }
  auto head(model::tensor_role role, std::int64_t rows, std::int64_t cols) const {
    return head_of(find(role, 0, false), rows, cols);
  }
  /// A norm's weights [n] in f32 (`shift` is added to each, for zero-centred norms).
  auto norm(model::tensor_role role, int layer, std::int64_t n, float shift = 0.0f) const {
    auto w = floats(role, layer, n, "norm");
    if (shift != 0.0f)
      for (auto& x : w) x = shift + x;
    return be.upload(std::move(w));
  }
  /// Any other vector (a bias, a norm where the family calls it a tensor) [n] in f32.
  auto vec(model::tensor_role role, int layer, std::int64_t n) const {
    return be.upload(floats(role, layer, n, "tensor"));
  }
  /// The same with `f` applied to each value on the host before the upload.
  template <class Fn>
  auto vec(model::tensor_role role, int layer, std::int64_t n, Fn&& f) const {
    auto w = floats(role, layer, n, "tensor");
    for (auto& x : w) x = f(x);
    return be.upload(std::move(w));
  }
  /// The same, or an empty vector where the file has none.
  auto optional_vec(model::tensor_role role, int layer, std::int64_t n) const {
    return find(role, layer, true) ? vec(role, layer, n) : be.upload(std::vector<float>{});
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
