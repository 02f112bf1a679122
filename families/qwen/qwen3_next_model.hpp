#pragma once
/// The Qwen3-Next forward: Qwen3.5's (qwen35_model.hpp) over weights loaded the Qwen3-Next way.
#include <families/qwen/qwen35_model.hpp>
#include <families/qwen/qwen3_next_config.hpp>
#include <families/qwen/qwen3_next_weights.hpp>
#include <tf/model/model_file.hpp>

namespace tf::families::qwen {

template <class B>
class qwen3_next_model : public qwen35_model<B> {
 public:
  using typename qwen35_model<B>::hparams;
  using typename qwen35_model<B>::weights;
  using qwen35_model<B>::qwen35_model;

  static hparams read_hparams(model::model_file const& file) {
    return read_qwen3_next_hparams(file);
  }
  static weights load(model::model_file const& file, B& be) {
    return load_qwen3_next_weights(file, be);
  }
  static hparams rank_hparams(hparams const& hp, dist::tensor_parallel const& r) {
    return qwen35_per_rank(hp, r, "qwen3_next");
  }
};

}  // namespace tf::families::qwen
