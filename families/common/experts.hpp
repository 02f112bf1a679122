#pragma once
/// Binding a MoE layer's experts: sliced from the 3-D stacked tensors GGUF keeps them in (and
/// transformers 5's fused checkpoints), or one tensor per expert (HF), described as host matrices
/// and uploaded to the backend.
#include <families/common/tensor_binder.hpp>
#include <tf/backend/host_matrix.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tf::families {

/// The `n_expert` matrices of `rows` x `cols` stacked in a 3-D tensor with dims
/// {cols, rows, n_expert} (GGUF's ffn_*_exps; anything with name, type, dims, data, bytes).
/// Throws tf::error naming the tensor when its shape or size disagrees.
template <class View>
std::vector<backend::host_matrix> stacked_experts(View const& t, std::int64_t rows,
                                                  std::int64_t cols, std::int64_t n_expert) {
  if (t.dims.size() != 3 || t.dims[0] != cols || t.dims[1] != rows || t.dims[2] != n_expert)
    throw error("tf: expert tensor {} has dims [{}], expected [{}, {}, {}]", t.name,
                fmt::join(t.dims, ", "), cols, rows, n_expert);
  auto const row_bytes = model::row_bytes(t.type, static_cast<std::uint64_t>(cols));
  auto const expert_bytes = row_bytes * static_cast<std::uint64_t>(rows);
  if (expert_bytes * static_cast<std::uint64_t>(n_expert) > t.bytes)
    throw error("tf: expert tensor {} holds {} bytes, {} experts of {} need {}", t.name, t.bytes,
                n_expert, expert_bytes, expert_bytes * static_cast<std::uint64_t>(n_expert));
  std::vector<backend::host_matrix> out;
  out.reserve(static_cast<std::size_t>(n_expert));
  for (std::int64_t e = 0; e < n_expert; ++e)
    out.push_back(backend::host_matrix{
        t.type, rows, cols, t.data + static_cast<std::uint64_t>(e) * expert_bytes, row_bytes});
  return out;
}

/// HF's stacked expert tensors (transformers 5) with `{}` for the layer: gate_up [hidden, 2 ff,
/// experts] (each expert's gate rows, then its up rows) and down [ff, hidden, experts]. For
/// experts without a gate, `gate_up` names the stacked up projection [hidden, ff, experts].
struct fused_expert_names {
  std::string_view gate_up, down;
};

/// Layer `layer`'s `n` experts (gate and up [ff, hidden], down [hidden, ff]) bound through `b`
/// (a tensor_binder whose map has ffn_{gate,up,down}_exps): from GGUF's stacked tensors, from
/// HF's fused stacked tensors where `fused` names them and the file has them, or from HF's one
/// tensor per expert (the map's HF name has a second `{}`, the expert). A map without
/// ffn_gate_exps binds experts without a gate (down(act(up x)), the gate matrix left empty).
/// Under tensor parallelism `ff` is this rank's share of the file's expert width, and each rank
/// binds its slice of every expert (gate and up rows, down columns).
/// Throws tf::error naming a missing or malformed tensor.
template <class Binder>
auto bind_experts(Binder const& b, int layer, std::int64_t n, std::int64_t ff, std::int64_t h,
                  fused_expert_names const* fused = nullptr) {
  using model::tensor_role;
  using B = std::remove_reference_t<decltype(b.be)>;
  bool const gated = model::find_role(b.map, tensor_role::ffn_gate_exps).has_value();
  std::vector<typename B::expert> out;
  auto add = [&](backend::host_matrix g, backend::host_matrix u, backend::host_matrix d) {
    out.push_back({gated ? b.shard(tensor_role::ffn_gate_exps, g, ff, h) : typename B::matrix{},
                   b.shard(tensor_role::ffn_up_exps, u, ff, h),
                   b.shard(tensor_role::ffn_down_exps, d, h, ff)});
  };
  // The file's expert width F: this rank's ff, or every rank's when the experts are split.
  auto const width = [&](auto const* t, std::int64_t per_expert_blocks) {
    auto const file_ff = t->dims.size() > 1 ? t->dims[1] / per_expert_blocks : ff;
    return file_ff == ff * b.ranks().size ? file_ff : ff;
  };
  if (b.style == name_style::gguf) {
    auto const F = width(b.find(tensor_role::ffn_up_exps, layer, false), 1);
    auto stack = [&](tensor_role role, std::int64_t rows, std::int64_t cols) {
      return stacked_experts(*b.find(role, layer, false), rows, cols, n);
    };
    auto const g =
        gated ? stack(tensor_role::ffn_gate_exps, F, h) : std::vector<backend::host_matrix>{};
    auto const u = stack(tensor_role::ffn_up_exps, F, h);
    auto const d = stack(tensor_role::ffn_down_exps, h, F);
    for (std::size_t e = 0; e < u.size(); ++e) add(gated ? g[e] : u[e], u[e], d[e]);
    return out;
  }
  auto tensor = [&](std::string const& name) {
    auto const* t = b.file.find_tensor(name);
    if (!t) throw error("tf: {} model lacks the tensor {}", b.family, name);
    return t;
  };
  if (fused) {
    if (auto const* gu = b.file.find_tensor(model::expand(fused->gate_up, layer))) {
      auto const F = width(gu, gated ? 2 : 1);
      auto const both = stacked_experts(*gu, gated ? 2 * F : F, h, n);
      auto const d = stacked_experts(*tensor(model::expand(fused->down, layer)), h, F, n);
      for (std::size_t e = 0; e < both.size(); ++e)
        add(row_slice(both[e], 0, F), gated ? row_slice(both[e], F, F) : both[e], d[e]);
      return out;
    }
  }
  auto one = [&](tensor_role role, int e, std::int64_t rows, std::int64_t cols) {
    return b.host_of(tensor(model::expand(b.name_of(role, layer), e)), rows, cols);
  };
  auto const F = width(tensor(model::expand(b.name_of(tensor_role::ffn_up_exps, layer), 0)), 1);
  for (int e = 0; e < n; ++e) {
    auto const g = gated ? one(tensor_role::ffn_gate_exps, e, F, h) : backend::host_matrix{};
    auto const u = one(tensor_role::ffn_up_exps, e, F, h);
    add(gated ? g : u, u, one(tensor_role::ffn_down_exps, e, h, F));
  }
  return out;
}

}  // namespace tf::families
