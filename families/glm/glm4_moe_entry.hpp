#pragma once
/// GLM-4.5 MoE's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/glm/glm4_moe.hpp>
#include <families/glm/glm4_moe_config.hpp>
#include <families/glm/glm4_moe_forward.hpp>
#include <families/glm/glm4_moe_weights.hpp>

namespace tf::families::glm {

struct glm4_moe_cpu {
  using forward_type = glm4_moe_forward;
  using family = glm4_moe;
  static constexpr std::string_view name = "glm4_moe";

  static bool accepts(std::string_view arch) { return arch == "glm4moe" || arch == "glm4_moe"; }

  static glm4_moe_hparams hparams(model::model_file const& file) {
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
  static std::unique_ptr<glm4_moe_forward> make(model::model_file const& file, kv_shape kv,
                                                int threads) {
    return std::make_unique<glm4_moe_forward>(load_moe_weights(file), kv, threads);
  }
};

static_assert(cpu_entry<glm4_moe_cpu>);

}  // namespace tf::families::glm
