#pragma once
/// GLM-4 dense's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/glm/glm4.hpp>
#include <families/glm/glm4_config.hpp>
#include <families/glm/glm4_forward.hpp>
#include <families/glm/glm4_load.hpp>

namespace tf::families::glm {

struct glm4_cpu {
  using forward_type = glm4_forward;
  using family = glm4;
  static constexpr std::string_view name = "glm4";

  static bool accepts(std::string_view arch) { return arch == "glm4"; }

  static glm4_hparams hparams(model::model_file const& file) {
    if (auto const* g = file.gguf()) return hparams_from_gguf(*g);
    return hparams_from_config(file.hf()->config());
  }
  static std::uint64_t kv_bytes_per_token(model::model_file const& file, kv_dtype dtype) {
    auto const hp = hparams(file);
    return kv_bytes(hp.num_layers, hp.num_kv_heads, hp.head_dim, dtype);
  }
  static std::int64_t context_length(model::model_file const& file) {
    return hparams(file).context_length;
  }
  static std::unique_ptr<glm4_forward> make(model::model_file const& file, kv_shape kv,
                                            int threads) {
    return std::make_unique<glm4_forward>(load_weights(file), kv, threads);
  }
};

static_assert(cpu_entry<glm4_cpu>);

}  // namespace tf::families::glm
