#pragma once
/// tf::families::open_mtp_head: the MTP head a model file carries, for the families that have one
/// in tf (Qwen3.5, Qwen3.5-MoE, Qwen3-Next: mtp.*; GLM-4.5: its next-n layer), on the CPU backend
/// or on the backend a caller names (CUDA beside a CUDA target).
#include <families/glm/glm4_moe_mtp.hpp>
#include <families/qwen/qwen35_mtp.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/mtp_head.hpp>
#include <tf/model/model_file.hpp>

#include <filesystem>
#include <memory>
#include <type_traits>
#include <utility>

namespace tf::families {

/// The MTP head of `file` (which must outlive it) on a backend of options `o`, or null where it
/// carries none or its family has no MTP head in tf.
template <class B>
std::unique_ptr<mtp_head> open_mtp_head_on(model::model_file const& file, typename B::options o) {
  auto const arch = file.architecture();
  if (arch == "glm4moe" || arch == "glm4_moe") {
    if (!glm::has_glm4_moe_mtp(file, glm::read_moe_hparams(file))) return nullptr;
    return std::make_unique<glm::glm4_moe_mtp_head<B>>(file, std::move(o));
  }
  return qwen::open_qwen35_mtp_head<B>(file, std::move(o));
}

/// The same on the CPU backend with `threads` threads.
inline std::unique_ptr<mtp_head> open_mtp_head(model::model_file const& file, int threads = 1) {
  return open_mtp_head_on<backend::cpu>(file, backend::cpu_options{threads});
}

namespace mtp_detail {

/// A head with the file its weights point into.
class file_mtp_head final : public mtp_head {
 public:
  template <class B>
  file_mtp_head(model::model_file file, typename B::options o, std::type_identity<B>)
      : file_(std::move(file)), head_(open_mtp_head_on<B>(file_, std::move(o))) {}
  bool empty() const { return !head_; }
  std::int64_t hidden_size() const override { return head_->hidden_size(); }
  std::int64_t vocab_size() const override { return head_->vocab_size(); }
  void set_streams(std::int32_t tokens, std::int32_t streams) override {
    head_->set_streams(tokens, streams);
  }
  kv_shape kv() const override { return head_->kv(); }
  std::uint64_t store_bytes() const override { return head_->store_bytes(); }
  std::uint64_t weight_bytes() const override { return head_->weight_bytes(); }
  void forward(std::span<batch_row const> rows, float const* hidden, float* logits,
               float* hidden_out) override {
    head_->forward(rows, hidden, logits, hidden_out);
  }

 private:
  model::model_file file_;
  std::unique_ptr<mtp_head> head_;
};

}  // namespace mtp_detail

/// The MTP head of the model at `path` (its file mapped) on a backend of options `o`, or null
/// where it carries none.
template <class B>
std::unique_ptr<mtp_head> open_mtp_head_on(std::filesystem::path const& path,
                                           typename B::options o) {
  auto h = std::make_unique<mtp_detail::file_mtp_head>(
      model::model_file::open(path, model::load_mode::map), std::move(o), std::type_identity<B>{});
  if (h->empty()) return nullptr;
  return h;
}

/// The same on the CPU backend with `threads` threads.
inline std::unique_ptr<mtp_head> open_mtp_head(std::filesystem::path const& path, int threads = 1) {
  return open_mtp_head_on<backend::cpu>(path, backend::cpu_options{threads});
}

}  // namespace tf::families
