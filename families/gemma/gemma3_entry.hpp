#pragma once
/// Gemma 3's CPU entry for tf-generate and serve (see families/common/cpu_entry.hpp).
#include <families/common/cpu_entry.hpp>
#include <families/gemma/gemma3.hpp>
#include <families/gemma/gemma3_config.hpp>
#include <families/gemma/gemma3_forward.hpp>
#include <families/gemma/gemma3_load.hpp>

namespace tf::families::gemma {

struct gemma3_cpu {
  using forward_type = gemma3_forward;
  using family = gemma3;
  static constexpr std::string_view name = "gemma3";

  static bool accepts(std::string_view arch) { return arch == "gemma3" || arch == "gemma3_text"; }

  static gemma3_hparams hparams(model::model_file const& file) {
    if (auto const* g = file.gguf()) return hparams_from_gguf(*g);
    return hparams_from_config(file.hf()->config());
  }
  // The CPU forward keeps K and V for every layer in its pages, sliding layers too.
  static std::uint64_t kv_bytes_per_token(model::model_file const& file, kv_dtype dtype) {
    auto const hp = hparams(file);
    return kv_bytes(hp.num_layers, hp.num_kv_heads, hp.head_dim, dtype);
  }
  static std::int64_t context_length(model::model_file const& file) {
    return hparams(file).context_length;
  }
  static std::unique_ptr<gemma3_forward> make(model::model_file const& file, kv_shape kv,
                                              int threads) {
    return std::make_unique<gemma3_forward>(load_weights(file), kv, threads);
  }
};

static_assert(cpu_entry<gemma3_cpu>);

}  // namespace tf::families::gemma
