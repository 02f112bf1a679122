#pragma once
/// Binds a model file's tensors by role through a family's tensor map (GGUF or HF names), checking
/// shapes, and hands them to the backend: matrices as the file holds them, vectors in f32. Under
/// tensor parallelism (a backend whose `ranks()` splits) each role's shard kind decides the slice
/// a rank binds: the rows of a column-parallel weight, the columns of a row-parallel one.
#include <kernels/cpu/dequant.hpp>
#include <tf/backend/host_matrix.hpp>
#include <tf/dist/tensor_parallel.hpp>
#include <tf/error.hpp>
#include <tf/model/tensor_names.hpp>
#include <tf/model/tensor_type.hpp>

#include <fmt/ranges.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tf::families {

/// Which column of the tensor map names the tensors.
enum class name_style { gguf, hf };

/// Rows [first, first + count) of m, as a matrix of their own.
inline backend::host_matrix row_slice(backend::host_matrix m, std::int64_t first,
                                      std::int64_t count) {
  m.data += static_cast<std::uint64_t>(first) * m.row_bytes;
  m.rows = count;
  return m;
}

/// The ranks backend `be` splits weights over: its `ranks()`, or one rank where it has none.
template <class B>
dist::tensor_parallel const& ranks_of(B const& be) {
  if constexpr (requires { be.ranks(); }) {
    return be.ranks();
  } else {
    static dist::tensor_parallel const solo{};
    return solo;
  }
}

/// A run of rows, columns or elements [first, first + count) of a tensor.
struct index_run {
  std::int64_t first = 0, count = 0;
};

/// This rank's share of each of `parts` whole parts laid one after another (q | k | v, or a
/// value head's block of every group), each part_i / size long; at one rank one run of all.
/// Adjacent runs merge, so a rank's slice that is one run of the file stays a view of it.
inline std::vector<index_run> rank_runs(std::span<std::int64_t const> parts,
                                        dist::tensor_parallel const& r, char const* family,
                                        char const* what) {
  std::vector<index_run> runs;
  std::int64_t at = 0;
  for (auto p : parts) {
    auto const mine = dist::split_evenly(static_cast<int>(p), r.size, family, what);
    index_run const run{at + r.rank * mine, mine};
    if (!runs.empty() && runs.back().first + runs.back().count == run.first)
      runs.back().count += run.count;
    else if (run.count > 0)
      runs.push_back(run);
    at += p;
  }
  return runs;
}

/// `runs` of heads as runs of the features they own: each head `width` wide, after `offset`.
inline std::vector<index_run> features_of(std::span<index_run const> runs, std::int64_t width,
                                          std::int64_t offset = 0) {
  std::vector<index_run> out;
  for (auto run : runs) out.push_back({offset + run.first * width, run.count * width});
  return out;
}

/// The concatenation of run lists, adjacent runs merged.
inline std::vector<index_run> joined(std::initializer_list<std::vector<index_run>> lists) {
  std::vector<index_run> out;
  for (auto const& l : lists)
    for (auto run : l)
      if (!out.empty() && out.back().first + out.back().count == run.first)
        out.back().count += run.count;
      else
        out.push_back(run);
  return out;
}

inline std::int64_t total(std::span<index_run const> runs) {
  std::int64_t n = 0;
  for (auto run : runs) n += run.count;
  return n;
}

/// Where this rank's `part` of `whole` features starts, when `whole` is `part` times a count of
/// parts that groups the ranks evenly (parts < size: replicated over size / parts ranks, as KV
/// heads are); nothing when the tensor is whole (`part == whole`) or does not split so.
inline std::optional<std::int64_t> slice_start(std::int64_t whole, std::int64_t part,
                                               dist::tensor_parallel const& r) {
  if (part <= 0 || whole == part || whole % part != 0) return std::nullopt;
  std::int64_t const parts = whole / part;
  if (parts > r.size || r.size % parts != 0) return std::nullopt;
  return r.rank / (r.size / parts) * part;
}

/// `hp` with the attention heads, KV heads and FFN width one rank of `r` holds (KV heads
/// replicated where the ranks outnumber them); `hp` itself at one rank.
template <class Hparams>
Hparams per_rank(Hparams hp, dist::tensor_parallel const& r, char const* family) {
  if (!r.split()) return hp;
  hp.num_heads = dist::split_evenly(hp.num_heads, r.size, family, "attention heads");
  hp.num_kv_heads = dist::split_kv_heads(hp.num_kv_heads, r.size, family);
  if constexpr (requires { hp.intermediate_size; })
    hp.intermediate_size = dist::split_evenly(hp.intermediate_size, r.size, family, "FFN columns");
  return hp;
}

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
  /// The ranks the weights are split over.
  dist::tensor_parallel const& ranks() const { return ranks_of(be); }

  /// A [rows, cols] matrix: this rank's slice by the role's shard kind where the file holds more
  /// (rows and cols are this rank's), the whole tensor otherwise.
  auto mat(model::tensor_role role, int layer, std::int64_t rows, std::int64_t cols) const {
    return mat_blocks(role, layer, {rows}, cols);
  }
  /// The same for a column-parallel projection that stacks blocks of rows (gate | up): the file
  /// holds each block whole, one after the other, and a rank takes its slice of each.
  auto mat_blocks(model::tensor_role role, int layer, std::initializer_list<std::int64_t> blocks,
                  std::int64_t cols) const {
    auto const* t = find(role, layer, false);
    std::int64_t rows = 0;
    for (auto b : blocks) rows += b;
    if (t->dims.size() == 2) {
      auto const kind = dist::shard_of(role);
      if (kind == dist::shard_kind::column && t->dims[0] == cols)
        if (auto first = slice_start(t->dims[1], rows, ranks()))
          return rows_of(host_of(t, t->dims[1], cols), *first / rows, blocks);
      if (kind == dist::shard_kind::row && t->dims[1] == rows && blocks.size() == 1)
        if (auto first = slice_start(t->dims[0], cols, ranks()))
          return columns_of(host_of(t, rows, t->dims[0]), *first, cols);
    }
    return be.upload(host_of(t, rows, cols));
  }
  /// This rank's [rows, cols] slice of `whole` (a matrix the caller cut from a file's tensor, as an
  /// expert from a stacked tensor) by the role's shard kind; `whole` itself where it is that shape.
  auto shard(model::tensor_role role, backend::host_matrix whole, std::int64_t rows,
             std::int64_t cols) const {
    auto const kind = dist::shard_of(role);
    if (kind == dist::shard_kind::column && whole.cols == cols)
      if (auto first = slice_start(whole.rows, rows, ranks()))
        return rows_of(whole, *first / rows, {rows});
    if (kind == dist::shard_kind::row && whole.rows == rows)
      if (auto first = slice_start(whole.cols, cols, ranks()))
        return columns_of(whole, *first, cols);
    if (whole.rows != rows || whole.cols != cols)
      throw error("tf: {} {} matrix of [{}, {}] does not split into [{}, {}] over {} ranks", family,
                  model::role_name(role), whole.rows, whole.cols, rows, cols, ranks().size);
    return be.upload(whole);
  }
  /// Rows `runs` of t [whole_rows, cols] in one matrix (a rank's heads of a fused projection): a
  /// view of the file where they are one run, a copy otherwise.
  template <class T>
  auto rows_at(T const* t, std::int64_t whole_rows, std::int64_t cols,
               std::span<index_run const> runs) const {
    return bind_rows(host_of(t, whole_rows, cols), runs);
  }
  /// Columns `runs` of t [rows, whole_cols] (a rank's input features of a row-parallel weight),
  /// copied; the backend all-reduces a matmul's partial sums. t itself where the runs are all of
  /// it.
  template <class T>
  auto columns_at(T const* t, std::int64_t rows, std::int64_t whole_cols,
                  std::span<index_run const> runs) const {
    auto const whole = host_of(t, rows, whole_cols);
    if (runs.size() == 1 && runs[0].first == 0 && runs[0].count == whole_cols)
      return be.upload(whole);
    return bind_columns(whole, runs);
  }
  /// Elements `runs` of t (of `whole` elements, each run counted in units of `width` elements: a
  /// conv's channels of `width` taps) in f32.
  template <class T>
  std::vector<float> floats_at(T const* t, std::int64_t whole, std::span<index_run const> runs,
                               std::int64_t width = 1) const {
    auto const all = floats_of(t, whole * width, "tensor");
    std::vector<float> out;
    for (auto run : runs)
      out.insert(out.end(), all.begin() + run.first * width,
                 all.begin() + (run.first + run.count) * width);
    return out;
  }

  /// The embedding or the head (each token reads all of it): the backend may lay it out for that.
  template <class T>
  auto head_of(T const* t, std::int64_t rows, std::int64_t cols) const {
    return be.upload_head(file, *t, host_of(t, rows, cols));
  }
  /// The head `whole` (the output tensor, or the embedding when tied), split over the ranks by
  /// vocabulary rows where the backend can (each rank's logits are then gathered), else whole.
  template <class M>
  M vocab_split(M const& whole) const {
    if constexpr (requires { be.vocab_slice(whole); })
      if (auto part = be.vocab_slice(whole)) return *part;
    return whole;
  }
  /// The head tensor `t` [rows, cols], split by vocabulary as vocab_split splits a bound head,
  /// without binding the other ranks' rows.
  template <class T>
  auto vocab_head(T const* t, std::int64_t rows, std::int64_t cols) const {
    if constexpr (requires { be.vocab_slice(host_of(t, rows, cols)); })
      if (auto part = be.vocab_slice(host_of(t, rows, cols))) return *part;
    return head_of(t, rows, cols);
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
  /// A column-parallel role's vector (a q/k/v bias) is this rank's slice where the file holds more.
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
  // Part `which` of each block of whole's rows (whole holds every part of block 0, then of block
  // 1, ...), in one matrix: a view of the file where that is one run of rows, a copy otherwise.
  auto rows_of(backend::host_matrix whole, std::int64_t which,
               std::initializer_list<std::int64_t> blocks) const {
    std::int64_t rows = 0;
    for (auto b : blocks) rows += b;
    std::int64_t const parts = whole.rows / rows;
    std::vector<index_run> runs;
    std::int64_t at = 0;
    for (auto b : blocks) {
      runs.push_back({at + which * b, b});
      at += parts * b;
    }
    return bind_rows(whole, runs);
  }
  // Rows `runs` of whole in one matrix: a view where one run, else a copy.
  auto bind_rows(backend::host_matrix whole, std::span<index_run const> runs) const {
    for (auto run : runs)
      if (run.first < 0 || run.count < 0 || run.first + run.count > whole.rows)
        throw error("tf: {} rows [{}, {}) lie outside a matrix of {} rows", family, run.first,
                    run.first + run.count, whole.rows);
    if (runs.size() == 1) return be.upload(row_slice(whole, runs[0].first, runs[0].count));
    auto const rows = total(runs);
    std::vector<std::byte> bytes(static_cast<std::size_t>(whole.row_bytes) *
                                 static_cast<std::size_t>(rows));
    std::int64_t out = 0;
    for (auto run : runs) {
      std::memcpy(bytes.data() + out * whole.row_bytes, row_slice(whole, run.first, 0).data,
                  static_cast<std::size_t>(whole.row_bytes) * static_cast<std::size_t>(run.count));
      out += run.count;
    }
    backend::host_matrix m{whole.type, rows, whole.cols, nullptr, whole.row_bytes};
    return upload_copy(std::move(bytes), m);
  }
  // Columns [first, first + count) of every row of whole, copied (a rank's share of the input
  // features): the backend all-reduces the partial sums a matmul by it gives.
  auto columns_of(backend::host_matrix whole, std::int64_t first, std::int64_t count) const {
    index_run const run{first, count};
    return bind_columns(whole, std::span(&run, 1));
  }
  auto bind_columns(backend::host_matrix whole, std::span<index_run const> runs) const {
    auto const cols = total(runs);
    auto const keep = model::row_bytes(whole.type, static_cast<std::uint64_t>(cols));
    std::vector<std::byte> bytes(
        static_cast<std::size_t>(keep * static_cast<std::uint64_t>(whole.rows)));
    std::uint64_t at = 0;  // where the run starts in a kept row
    for (auto run : runs) {
      if (run.first < 0 || run.first + run.count > whole.cols)
        throw error("tf: {} columns [{}, {}) lie outside a matrix of {} columns", family, run.first,
                    run.first + run.count, whole.cols);
      auto const skip = model::row_bytes(whole.type, static_cast<std::uint64_t>(run.first));
      auto const len = model::row_bytes(whole.type, static_cast<std::uint64_t>(run.count));
      for (std::int64_t r = 0; r < whole.rows; ++r)
        std::memcpy(bytes.data() + static_cast<std::uint64_t>(r) * keep + at,
                    whole.data + static_cast<std::uint64_t>(r) * whole.row_bytes + skip, len);
      at += len;
    }
    backend::host_matrix m{whole.type, whole.rows, cols, nullptr, keep};
    m.partial_sum = true;
    return upload_copy(std::move(bytes), m);
  }
  auto upload_copy(std::vector<std::byte> bytes, backend::host_matrix m) const {
    if constexpr (requires { be.upload_owned(std::move(bytes), m); }) {
      return be.upload_owned(std::move(bytes), m);
    } else {
      m.data = bytes.data();
      return be.upload(m);  // a backend that copies the weights to its own memory
    }
  }

  std::vector<float> floats(model::tensor_role role, int layer, std::int64_t n,
                            char const* what) const {
    auto const* t = find(role, layer, false);
    if (dist::shard_of(role) == dist::shard_kind::column)
      if (auto first = slice_start(t->elements(), n, ranks())) {
        auto whole = floats_of(t, t->elements(), what);
        return {whole.begin() + *first, whole.begin() + *first + n};
      }
    return floats_of(t, n, what);
  }
  template <class T>
  std::vector<float> floats_of(T const* t, std::int64_t n, char const* what) const {
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
