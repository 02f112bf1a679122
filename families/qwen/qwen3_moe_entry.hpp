#pragma once
/// Qwen3-MoE's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/qwen/qwen3_forward.hpp>
#include <families/qwen/qwen3_moe.hpp>
#include <families/qwen/qwen3_moe_config.hpp>
#include <families/qwen/qwen3_moe_load.hpp>

#include <memory>
#include <string_view>

namespace tf::families::qwen {

using qwen3_moe_forward = basic_qwen3_forward<qwen3_moe_weights>;

struct qwen3_moe_cpu {
  using forward_type = qwen3_moe_forward;
  using family = qwen3_moe;
  static constexpr std::string_view name = "qwen3_moe";

  static bool accepts(std::string_view arch) { return arch == "qwen3moe" || arch == "qwen3_moe"; }

  static qwen3_moe_hparams hparams(model::model_file const& file) {
    if (auto const* g = file.gguf()) return moe_hparams_from_gguf(*g);
    return moe_hparams_from_config(file.hf()->config());
  }
  static std::uint64_t kv_bytes_per_token(model::model_file const& file, kv_dtype dtype) {
    auto const hp = hparams(file);
    return kv_bytes(hp.num_layers, hp.num_kv_heads, hp.head_dim, dtype);
  }
  static std::int64_t context_length(model::model_file const& file) {
    return hparams(file).context_length;
  }
  static std::unique_ptr<qwen3_moe_forward> make(model::model_file const& file, kv_shape kv,
                                                 int threads) {
    return std::make_unique<qwen3_moe_forward>(load_moe_weights(file), kv, threads);
  }
};

static_assert(cpu_entry<qwen3_moe_cpu>);

}  // namespace tf::families::qwen
