#pragma once
/// Qwen3-Next weights: Qwen3.5's (qwen35_weights.hpp binds everything else), with the GDN input
/// projections interleaved per k-head group g of r = nv / nk value heads. HF: in_proj_qkvz rows
/// [q_g (dk), k_g (dk), v_g (r dv), z_g (r dv)] per group and in_proj_ba [b_g (r), a_g (r)].
/// llama.cpp's GGUF: attn_qkv [q_all, k_all, v_all] and attn_gate (z) flat, ssm_ba interleaved as
/// HF's (legacy files: ssm_in, interleaved as HF's qkvz). Interleaved rows are copied into the
/// flat order the forward reads, once, on the host.
#include <families/common/tensor_binder.hpp>
#include <families/qwen/qwen35_hparams.hpp>
#include <families/qwen/qwen35_weights.hpp>
#include <families/qwen/qwen3_next_config.hpp>
#include <tf/model/model_file.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace tf::families::qwen {

inline constexpr qwen35_name qwen3_next_in_proj_qkvz{
    "blk.{}.ssm_in.weight", "model.layers.{}.linear_attn.in_proj_qkvz.weight"};
inline constexpr qwen35_name qwen3_next_in_proj_ba{"blk.{}.ssm_ba.weight",
                                                   "model.layers.{}.linear_attn.in_proj_ba.weight"};

namespace qwen3_next_detail {

/// Row indices of part [first, first + count) of each group in `groups` (runs of groups of
/// `width` rows), group by group.
inline std::vector<std::int64_t> part_rows(std::span<index_run const> groups, std::int64_t width,
                                           std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> rows;
  for (auto run : groups)
    for (std::int64_t g = run.first; g < run.first + run.count; ++g)
      for (std::int64_t r = 0; r < count; ++r) rows.push_back(g * width + first + r);
  return rows;
}

/// Rows `order` of m, copied in that order, uploaded to `be`: a backend that reads host memory
/// keeps the copy (and counts it among its weights), one with its own memory copies it there.
template <class B>
typename B::matrix upload_rows(B& be, backend::host_matrix const& m,
                               std::span<std::int64_t const> order) {
  std::vector<std::byte> bytes(order.size() * m.row_bytes);
  for (std::size_t i = 0; i < order.size(); ++i)
    std::memcpy(bytes.data() + i * m.row_bytes,
                m.data + static_cast<std::uint64_t>(order[i]) * m.row_bytes, m.row_bytes);
  auto rows = m;
  rows.rows = static_cast<std::int64_t>(order.size());
  rows.data = bytes.data();
  if constexpr (requires { be.upload_owned(std::move(bytes), rows); })
    return be.upload_owned(std::move(bytes), rows);
  else
    return be.upload(rows);
}

/// GDN layer i's input projections as the forward reads them: qkv [q_all, k_all, v_all], z, b, a,
/// value head g r + i in HF's order (it reads k-head g); the rows of this rank's `heads` (the
/// k-head groups `heads.k`), `hp` the whole model's.
template <class B, class Binder>
void bind_projections(qwen35_layer_weights<B>& l, Binder const& b, qwen35_hparams const& hp, int i,
                      qwen35_delta_heads const& heads) {
  using model::tensor_role;
  std::int64_t const h = hp.hidden_size, nk = hp.linear_num_key_heads;
  std::int64_t const nv = hp.linear_num_value_heads, r = nv / nk, dk = hp.linear_key_head_dim;
  std::int64_t const rv = r * hp.linear_value_head_dim, v_all = nv * hp.linear_value_head_dim;
  auto& d = l.delta;
  // tensor_role::ssm_in is the flat attn_qkv; the interleaved GGUF tensor is the legacy ssm_in.
  bool const interleaved =
      b.style == name_style::hf || (!b.find(tensor_role::ssm_in, i, true) &&
                                    qwen35_detail::find(b, qwen3_next_in_proj_qkvz, i, true));
  if (interleaved) {
    std::int64_t const width = 2 * dk + 2 * rv;
    auto const m =
        b.host_of(qwen35_detail::find(b, qwen3_next_in_proj_qkvz, i, false), nk * width, h);
    auto qkv = part_rows(heads.k, width, 0, dk);
    for (auto part : {part_rows(heads.k, width, dk, dk), part_rows(heads.k, width, 2 * dk, rv)})
      qkv.insert(qkv.end(), part.begin(), part.end());
    d.qkv = upload_rows(b.be, m, qkv);
    d.z = upload_rows(b.be, m, part_rows(heads.k, width, 2 * dk + rv, rv));
  } else {
    d.qkv = b.rows_at(b.find(tensor_role::ssm_in, i, false), hp.conv_dim(), h,
                      qwen35_detail::qkv_runs(hp, heads));
    d.z = b.rows_at(qwen35_detail::find(b, qwen35_in_proj_z, i, false), v_all, h,
                    features_of(heads.v, hp.linear_value_head_dim));
  }
  auto const ba = b.host_of(qwen35_detail::find(b, qwen3_next_in_proj_ba, i, false), 2 * nv, h);
  d.b = upload_rows(b.be, ba, part_rows(heads.k, 2 * r, 0, r));
  d.a = upload_rows(b.be, ba, part_rows(heads.k, 2 * r, r, r));
}

}  // namespace qwen3_next_detail

/// Binds the weights of `file` (anything with `find_tensor(name) -> const tensor_view*`) to `be`;
/// `style` picks GGUF or HF names. Throws tf::error naming a missing or misshapen tensor.
template <class File, class B>
qwen35_weights<B> bind_qwen3_next_weights(File const& file, qwen35_hparams const& hp,
                                          name_style style, B& be) {
  return qwen35_detail::bind_hybrid_weights(
      file, hp, style, be, "qwen3_next", [&](auto& layer, auto const& b, int i, auto const& heads) {
        qwen3_next_detail::bind_projections(layer, b, hp, i, heads);
      });
}

/// The weights of `file`, which must outlive them, bound to `be`.
template <class B>
qwen35_weights<B> load_qwen3_next_weights(model::model_file const& file, B& be) {
  if (auto const* g = file.gguf())
    return bind_qwen3_next_weights(*g, qwen3_next_hparams_from_gguf(*g), name_style::gguf, be);
  auto const& hf = *file.hf();
  return bind_qwen3_next_weights(hf, qwen3_next_hparams_from_config(hf.config()), name_style::hf,
                                 be);
}

}  // namespace tf::families::qwen
