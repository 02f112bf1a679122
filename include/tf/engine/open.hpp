#pragma once
/// tf::open: a model file (GGUF or Hugging Face folder) through the family registry into a
/// loaded_model, on the CPU backend unless told otherwise.
#include <families/registry.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/backend/cuda_matmul.hpp>
#include <tf/engine/engine.hpp>
#include <tf/engine/loaded_model.hpp>
#include <tf/engine/stream.hpp>
#include <tf/model/load_mode.hpp>
#include <tf/model/model_file.hpp>
#include <tf/tokenizer/text_codec.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

namespace tf {

/// How to open a model.
struct open_options {
  int threads = 1;                                               // the CPU backend's threads
  int device = 0;                                                // a GPU backend's device index
  backend::cuda_matmul cuda_matmul = backend::cuda_matmul::own;  // the CUDA backend's matmuls
  model::load_mode load = model::load_mode::read;  // read: a copy in memory; map: mmap
  kv_dtype kv = kv_dtype::f16;
  std::int32_t context = 0;  // generate()'s window; 0: the trained context, at most 4096
  std::int32_t page_tokens = 256;
};

/// B's options from `o`: the threads of a backend that takes threads, the device (and matmul
/// path) of one that takes a device.
template <class B>
typename B::options backend_options(open_options const& o) {
  typename B::options b{};
  if constexpr (requires { b.threads; }) b.threads = o.threads;
  if constexpr (requires { b.device; }) b.device = o.device;
  if constexpr (requires { b.matmul; }) b.matmul = o.cuda_matmul;
  return b;
}

/// A loaded model of family F on backend B: owns the file (the weights may point into it), the
/// engine and the codec.
template <class F, class B>
class loaded_engine final : public loaded_model {
 public:
  using engine_type = engine<F, B>;

  loaded_engine(model::model_file file, std::filesystem::path const& path, open_options const& o)
      : file_(std::move(file)), engine_(file_, shape(file_, o), backend_options<B>(o)) {
    if (tokenizer::has_tokenizer(file_, path))
      codec_.emplace(
          tokenizer::load_codec(file_, path, path.filename().string(), builtin_chat_template<F>()));
  }

  std::string_view family() const override { return F::name; }
  std::string_view backend() const override { return B::name; }
  std::int64_t vocab_size() const override { return engine_.vocab_size(); }
  kv_shape kv() const override { return engine_.kv(); }
  std::uint64_t store_bytes() const override {
    auto const k = engine_.kv();
    auto const positions =
        static_cast<std::uint64_t>(k.num_pages) * static_cast<std::uint64_t>(k.page_tokens);
    return positions * engine_type::kv_bytes_per_token(file_, k.dtype) +
           static_cast<std::uint64_t>(k.num_state_slots) *
               engine_type::state_bytes_per_stream(file_);
  }
  bool recurrent() const override { return engine_type::has_state; }
  void forward(std::span<batch_row const> rows, float* logits) override {
    engine_.forward(rows, logits);
  }
  std::int64_t hidden_size() const override {
    if constexpr (engine_type::gives_hidden) return engine_.hidden_size();
    return 0;
  }
  void forward_hidden(std::span<batch_row const> rows, float* logits, float* hidden) override {
    if constexpr (engine_type::gives_hidden)
      engine_.forward(rows, logits, hidden);
    else
      loaded_model::forward_hidden(rows, logits, hidden);
  }
  void forward_sample(std::span<batch_row const> rows, std::span<sample::sampler* const> samplers,
                      std::span<std::span<std::int32_t const> const> histories,
                      std::span<sample::sample_result> out) override {
    engine_.forward_sample(rows, samplers, histories, out);
  }
  std::int64_t trained_context() const override { return engine_type::context_length(file_); }
  void set_context(std::int32_t tokens) override {
    engine_.reshape_kv(one_stream_shape(tokens, engine_.kv().page_tokens, engine_.kv().dtype));
  }
  void set_streams(std::int32_t tokens, std::int32_t streams) override {
    if (streams <= 0) throw error("tf: set_streams wants at least one stream, got {}", streams);
    auto one = one_stream_shape(tokens, engine_.kv().page_tokens, engine_.kv().dtype);
    one.num_pages *= streams;
    one.num_state_slots = streams;
    engine_.reshape_kv(one);
  }
  engine_type& get() { return engine_; }

 private:
  static kv_shape shape(model::model_file const& file, open_options const& o) {
    std::int64_t const trained = engine_type::context_length(file);
    std::int64_t const context =
        o.context > 0 ? o.context : std::min<std::int64_t>(trained > 0 ? trained : 4096, 4096);
    return one_stream_shape(static_cast<std::int32_t>(context), o.page_tokens, o.kv);
  }

  model::model_file file_;
  engine_type engine_;
};

/// A loaded_engine<F, B> over `file`: what open() makes once it knows the family.
template <class F, class B>
std::unique_ptr<loaded_model> open_family(model::model_file file, std::filesystem::path const& path,
                                          open_options const& o) {
  return std::make_unique<loaded_engine<F, B>>(std::move(file), path, o);
}

/// Calls `f(hana::type_c<Family>)` for the family of `Registry` that answers `file`'s
/// architecture when it runs on B; throws tf::error naming what is missing otherwise.
template <class Registry, class B, class Fn>
void with_family(model::model_file const& file, Fn&& f) {
  std::string const arch(file.architecture());  // f may replace the file
  Registry::dispatch(arch, [&](auto t) {
    using F = typename decltype(t)::type;
    if constexpr (runs_on<F, B>)
      f(t);
    else
      require_forward<F, B>();
  });
}

/// Opens `path` through `Registry` (the built-in families unless given) on backend B.
template <class Registry = families::builtin, class B = backend::cpu>
std::unique_ptr<loaded_model> open(std::filesystem::path const& path, open_options const& o = {}) {
  auto file = model::model_file::open(path, o.load);
  std::string const arch(file.architecture());  // the file moves into the model below
  return Registry::dispatch(arch, [&](auto t) -> std::unique_ptr<loaded_model> {
    using F = typename decltype(t)::type;
    if constexpr (runs_on<F, B>) {
      return open_family<F, B>(std::move(file), path, o);
    } else {
      require_forward<F, B>();
      return nullptr;
    }
  });
}

}  // namespace tf

// tf's own binaries link each built-in family's open_family on the CPU from one library.
#ifdef TF_PREBUILT_OPEN
#include <tf/engine/prebuilt_open.hpp>
#endif
