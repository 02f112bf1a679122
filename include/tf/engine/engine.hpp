#pragma once
/// tf::engine<Family, Backend>: a family's forward on a backend. It owns the backend (its threads
/// and buffers), the bound weights, the KV store and, for a family with recurrent layers, the
/// recurrent-state store (one slot per stream), and runs one batch of rows per forward().
#include <tf/backend/backend.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/backend/device_sampling.hpp>
#include <tf/batch.hpp>
#include <tf/dist/tensor_parallel.hpp>
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/model/model_file.hpp>
#include <tf/sample/sampler.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace tf {

/// The family has a forward on the backend and the backend offers what that forward needs.
template <class Family, class Backend>
inline constexpr bool runs_on =
    has_forward<Family, Backend>&& backend::offers_needs<Family, Backend>;

/// Throws, naming the family and the backend (and the capability), where the family cannot run
/// on the backend.
template <class Family, class Backend>
void require_forward() {
  if constexpr (!has_forward<Family, Backend>)
    throw error("tf: the '{}' family is recognised but has no forward pass on the {} backend yet",
                Family::name, Backend::name);
  else if constexpr (!backend::offers_needs<Family, Backend>)
    throw error("tf: the '{}' family needs {}, which the {} backend does not offer", Family::name,
                backend::missing_capability<Family, Backend>, Backend::name);
}

template <class Family, class Backend>
class engine {
  static_assert(family_check<Family>::ok);
  static_assert(backend::backend<Backend>,
                "tf: the backend must model tf::backend::backend (include/tf/backend/backend.hpp): "
                "name, memory, its buffer types and the forward's operations.");
  static_assert(has_forward<Family, Backend>,
                "tf: this family has no forward: declare `template <class B> using model = "
                "YourModel<B>;` in its traits (see docs/adding-a-family.md).");
  static_assert(backend::check_needs<Family, Backend>);

 public:
  using family = Family;
  using backend_type = Backend;
  using pool = pool_of<Family>;
  using model_type = typename Family::template model<Backend>;
  using weights = typename model_type::weights;
  using hparams_type = typename model_type::hparams;
  using options = typename Backend::options;

  static constexpr std::string_view family_name = Family::name;
  static constexpr bool binds_kv_pool = tf::binds_kv_pool<Family>;
  /// The model keeps recurrent state per stream: it declares `state_layout(hparams)`.
  static constexpr bool has_state = requires(hparams_type const& hp) {
    model_type::state_layout(hp);
  };

  /// Binds the weights of `file` (which must outlive the engine) and sizes the KV store.
  engine(model::model_file const& file, kv_shape kv, options o = {})
      : be_(o), model_(model_type::load(file, be_)), kv_(make_kv(kv)), states_(make_states(kv)) {}

  /// An engine over weights already bound (to a backend of the same kind).
  engine(weights w, kv_shape kv, options o = {})
      : be_(o), model_(std::move(w)), kv_(make_kv(kv)), states_(make_states(kv)) {}

  engine(engine const&) = delete;
  engine& operator=(engine const&) = delete;

  /// The file's hyper-parameters, its KV bytes per position and its trained context length,
  /// without binding anything (the memory budget reads these before the weights load).
  static hparams_type read_hparams(model::model_file const& file) {
    return model_type::read_hparams(file);
  }
  /// KV bytes per position of the whole model.
  static std::uint64_t kv_bytes_per_token(model::model_file const& file, kv_dtype dtype) {
    return backend::kv_bytes_per_token(kv_layout(read_hparams(file)), dtype);
  }
  /// KV bytes per position on one rank of `ranks`: its share of the KV heads where the model
  /// splits them (it declares `rank_hparams(hp, ranks)`, the split its weights bind), all of them
  /// where its weights stay whole on every rank.
  static std::uint64_t kv_bytes_per_token(model::model_file const& file, kv_dtype dtype,
                                          dist::tensor_parallel const& ranks) {
    auto const hp = read_hparams(file);
    if constexpr (requires { model_type::rank_hparams(hp, ranks); })
      return backend::kv_bytes_per_token(kv_layout(model_type::rank_hparams(hp, ranks)), dtype);
    else
      return backend::kv_bytes_per_token(kv_layout(hp), dtype);
  }
  /// The model's own KV layout, or every layer attending with num_kv_heads x head_dim.
  static backend::kv_layout kv_layout(hparams_type const& hp) {
    if constexpr (requires { model_type::kv_layout(hp); })
      return model_type::kv_layout(hp);
    else
      return {hp.num_layers, hp.num_kv_heads, hp.head_dim};
  }
  /// Bytes of one stream's recurrent state (0 without recurrent layers).
  static std::uint64_t state_bytes_per_stream(model::model_file const& file) {
    if constexpr (has_state) {
      return backend::state_bytes_per_slot(model_type::state_layout(read_hparams(file)));
    } else {
      return 0;
    }
  }
  /// The same on one rank of `ranks`: the state of its share of the recurrent heads where the
  /// model splits them.
  static std::uint64_t state_bytes_per_stream(model::model_file const& file,
                                              dist::tensor_parallel const& ranks) {
    if constexpr (has_state) {
      auto const hp = read_hparams(file);
      if constexpr (requires { model_type::rank_hparams(hp, ranks); })
        return backend::state_bytes_per_slot(
            model_type::state_layout(model_type::rank_hparams(hp, ranks)));
      else
        return backend::state_bytes_per_slot(model_type::state_layout(hp));
    } else {
      return 0;
    }
  }
  static std::int64_t context_length(model::model_file const& file) {
    return read_hparams(file).context_length;
  }

  /// Runs every row; writes logits [logits_rows(rows), vocab] in row order.
  void forward(std::span<batch_row const> rows, float* logits) {
    auto const& step = be_.begin(rows, kv_, vocab_size());
    if constexpr (has_state)
      model_.forward(be_, kv_, states_, step, logits);
    else
      model_.forward(be_, kv_, step, logits);
  }

  /// Whether forward() can also give the final hidden states (MTP heads read them).
  static constexpr bool gives_hidden = requires(Backend & b, float* p) { b.capture_hidden(p); };

  /// forward(), and every token's final hidden state (the residual stream after the output norm:
  /// what the head reads) [tokens of all rows, hidden_size()] into `hidden`. The logits are the
  /// same bits as forward()'s.
  void forward(std::span<batch_row const> rows, float* logits,
               float* hidden) requires gives_hidden {
    be_.capture_hidden(hidden);
    try {
      forward(rows, logits);
    } catch (...) {
      be_.capture_hidden(nullptr);
      throw;
    }
    be_.capture_hidden(nullptr);
  }
  std::int64_t hidden_size() const { return model_.bound().hp.hidden_size; }

  /// Runs every row and samples each logit row i with samplers[i] over histories[i] (one per
  /// logits_rows(rows)) into out[i]. On a backend that samples on the device, when every sampler
  /// is device-eligible, only tokens and logprobs leave the device; otherwise (a grammar, many top
  /// logprobs, the CPU backend) the logits come to the host for sampler::sample. Either way each
  /// request's stream draws once per token, and the tokens are the same (docs/kernel-contract.md).
  void forward_sample(std::span<batch_row const> rows, std::span<sample::sampler* const> samplers,
                      std::span<std::span<std::int32_t const> const> histories,
                      std::span<sample::sample_result> out) {
    auto const n = static_cast<std::size_t>(logits_rows(rows));
    if (samplers.size() != n || histories.size() != n || out.size() != n)
      throw error("tf: forward_sample of {} logit rows got {} samplers, {} histories, {} results",
                  n, samplers.size(), histories.size(), out.size());
    auto const vocab = static_cast<std::size_t>(vocab_size());
    if constexpr (backend::device_sampling<Backend>) {
      if (std::all_of(samplers.begin(), samplers.end(),
                      [](sample::sampler const* s) { return s->device_eligible(); })) {
        forward(rows, nullptr);
        sample_rows_.clear();
        sample_adjust_.clear();
        for (std::size_t i = 0; i < n; ++i)
          sample_rows_.push_back(samplers[i]->device_row(vocab, histories[i], sample_adjust_));
        sample_out_.resize(n);
        be_.sample_rows(sample_rows_, sample_adjust_, sample_out_);
        for (std::size_t i = 0; i < n; ++i) out[i] = result_of(sample_out_[i]);
        return;
      }
    }
    host_logits_.resize(n * vocab);
    forward(rows, host_logits_.data());
    for (std::size_t i = 0; i < n; ++i)
      out[i] = samplers[i]->sample(std::span<float const>(host_logits_).subspan(i * vocab, vocab),
                                   histories[i]);
  }

  /// New, empty stores of `kv` (every stream in the old ones is gone).
  void reshape_kv(kv_shape kv) {
    kv_ = make_kv(kv);
    states_ = make_states(kv);
  }

  // The recurrent-state slots (what the lane host reads for a ledgerPool family).
  std::int32_t num_state_slots() const { return has_state ? kv_.shape().num_state_slots : 0; }
  std::int64_t state_bytes() const {
    if constexpr (has_state) return states_.slot_bytes();
    return 0;
  }
  /// Slot `to` takes slot `from`'s state (a kept prefix's state for a stream that reuses it).
  void copy_state(std::int32_t from, std::int32_t to) {
    if constexpr (has_state)
      states_.copy(from, to);
    else
      throw error("tf: the '{}' family keeps no recurrent state", Family::name);
  }

  /// Page `to` takes page `from`'s K and V in every layer (copy-on-write of a shared page).
  void copy_page(std::int32_t from, std::int32_t to) { kv_.copy_page(from, to); }

  std::int64_t vocab_size() const { return model_.bound().hp.vocab_size; }
  hparams_type const& hparams() const { return model_.bound().hp; }
  weights const& bound_weights() const { return model_.bound(); }
  kv_shape kv() const { return kv_.shape(); }
  /// The KV store itself, for a drafter that reads the target's KV (set_streams and
  /// set_context replace it).
  typename Backend::kv_store const& kv_store() const { return kv_; }
  Backend& backend() { return be_; }

  // What the lane host reads (serve::batched_model).
  std::size_t page_tokens() const { return static_cast<std::size_t>(kv_.shape().page_tokens); }
  std::size_t num_pages() const { return static_cast<std::size_t>(kv_.shape().num_pages); }

 private:
  typename Backend::kv_store make_kv(kv_shape kv) {
    return be_.make_kv_store(kv, kv_layout(model_.bound().hp));
  }

  static sample::sample_result result_of(kernels::portable::sample_math::row_result const& r) {
    sample::sample_result out;
    out.token = r.token;
    out.logprob = r.logprob;
    for (std::int32_t k = 0; k < r.top_count; ++k)
      out.top.push_back({r.top_token[k], r.top_logprob[k]});
    return out;
  }

  typename Backend::state_store make_states(kv_shape kv) {
    if constexpr (has_state) {
      if (kv.num_state_slots <= 0)
        throw error("tf: the '{}' family keeps recurrent state: give the engine state slots",
                    Family::name);
      return be_.make_state_store(kv.num_state_slots, model_type::state_layout(hparams()));
    } else {
      return {};
    }
  }

  Backend be_;
  model_type model_;
  typename Backend::kv_store kv_;
  typename Backend::state_store states_;
  // forward_sample's buffers, kept between forwards.
  std::vector<float> host_logits_;
  std::vector<kernels::portable::sample_math::row_params> sample_rows_;
  std::vector<kernels::portable::sample_math::logit_adjust> sample_adjust_;
  std::vector<kernels::portable::sample_math::row_result> sample_out_;
};

}  // namespace tf
