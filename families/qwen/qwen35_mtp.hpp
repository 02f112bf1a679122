#pragma once
/// The MTP head of Qwen3.5, Qwen3.5-MoE and Qwen3-Next checkpoints (HF mtp.*; GGUF's block after
/// the decoder layers with its nextn.* tensors): x = fc(concat(norm_e(embed(t)), norm_h(h))), one
/// gated full-attention decoder layer (a dense MLP, or routed experts where the model routes),
/// then its own norm and the target's head. Runs on any backend with `load` and `join_columns`
/// (the CPU's and CUDA's), with its own KV store.
#include <families/qwen/qwen35_config.hpp>
#include <families/qwen/qwen35_weights.hpp>
#include <families/qwen/qwen3_next_config.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/mtp_head.hpp>
#include <tf/engine/stream.hpp>
#include <tf/error.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/layers/moe.hpp>
#include <tf/layers/mtp_input.hpp>
#include <tf/model/model_file.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace tf::families::qwen {

/// The head's weights; matrices may point into the file, which must outlive them.
template <class B>
struct qwen35_mtp_weights {
  qwen35_hparams hp;
  typename B::matrix embd, output, fc;  // fc [hidden, 2 hidden] over [embedding | hidden]
  typename B::vector enorm, hnorm, norm;
  qwen35_layer_weights<B> layer;
};

/// An HF file seen with the MTP layer as decoder layer `at`: model.layers.{at}.* is
/// mtp.layers.0.*, so the decoder layer's binders read it.
template <class File>
struct qwen35_mtp_hf_view {
  File const& file;
  int at;
  model::tensor_view const* find_tensor(std::string_view name) const {
    auto const prefix = "model.layers." + std::to_string(at) + ".";
    if (name.starts_with(prefix))
      return file.find_tensor("mtp.layers.0." + std::string(name.substr(prefix.size())));
    return file.find_tensor(name);
  }
};

namespace qwen35_detail {

template <class Binder>
model::tensor_view const* find_named(Binder const& b, std::string const& name, bool optional) {
  auto const* t = b.file.find_tensor(name);
  if (!t && !optional) throw error("tf: {} model lacks the MTP tensor {}", b.family, name);
  return t;
}

template <class Binder>
std::vector<float> named_norm(Binder const& b, std::string const& name, std::int64_t n,
                              float shift) {
  auto w = floats(*find_named(b, name, false), n, b.family);
  for (auto& x : w) x += shift;
  return w;
}

/// The head's tensors under `b` (HF: mtp.* with the layer at `at`; GGUF: blk.{at}.*).
template <class Binder>
auto bind_mtp(Binder const& b, qwen35_hparams const& hp, int at) {
  using model::tensor_role;
  using B = std::remove_reference_t<decltype(b.be)>;
  bool const hf = b.style == name_style::hf;
  float const shift = hf ? 1.0f : 0.0f;  // HF norms are (1 + w)
  std::int64_t const h = hp.hidden_size;
  auto const nextn = [&](char const* what) {
    return "blk." + std::to_string(at) + ".nextn." + what + ".weight";
  };
  qwen35_mtp_weights<B> w;
  w.hp = hp;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* head = b.find(tensor_role::output, 0, true);
  w.output = head && !hp.tie_word_embeddings ? b.head_of(head, hp.vocab_size, h) : w.embd;
  w.fc = b.be.upload(
      b.host_of(find_named(b, hf ? "mtp.fc.weight" : nextn("eh_proj"), false), h, 2 * h));
  w.enorm = b.be.upload(
      named_norm(b, hf ? "mtp.pre_fc_norm_embedding.weight" : nextn("enorm"), h, shift));
  w.hnorm =
      b.be.upload(named_norm(b, hf ? "mtp.pre_fc_norm_hidden.weight" : nextn("hnorm"), h, shift));
  // GGUF may leave the head's norm out: the model's output norm then serves.
  auto const norm_name = hf ? std::string("mtp.norm.weight") : nextn("shared_head_norm");
  w.norm = find_named(b, norm_name, !hf) ? b.be.upload(named_norm(b, norm_name, h, shift))
                                         : b.norm(tensor_role::output_norm, 0, h, shift);
  auto& l = w.layer;
  l.attn_norm = b.norm(tensor_role::attn_norm, at, h, shift);
  l.ffn_norm = b.norm(tensor_role::ffn_norm, at, h, shift);
  bind_attention(l, b, hp, at, shift);
  if (hp.is_moe(at)) {  // routed where the model would route a layer `at`
    bind_moe(l, b, hp, at);
  } else {
    std::int64_t const ff = hp.intermediate_size;
    l.mlp.gate = b.mat(tensor_role::ffn_gate, at, ff, h);
    l.mlp.up = b.mat(tensor_role::ffn_up, at, ff, h);
    l.mlp.down = b.mat(tensor_role::ffn_down, at, h, ff);
  }
  return w;
}

}  // namespace qwen35_detail

/// Whether `file` (a Qwen3.5, Qwen3.5-MoE or Qwen3-Next model) carries an MTP head.
inline bool has_qwen35_mtp(model::model_file const& file, qwen35_hparams const& hp) {
  if (auto const* g = file.gguf())
    return g->find_tensor("blk." + std::to_string(hp.num_layers) + ".nextn.eh_proj.weight");
  return file.hf()->find_tensor("mtp.fc.weight") != nullptr;
}

/// The MTP head's weights of `file` bound to `be`; `next` picks Qwen3-Next's hyper-parameters.
template <class B>
qwen35_mtp_weights<B> load_qwen35_mtp_weights(model::model_file const& file, B& be, bool next) {
  auto const hp = next ? read_qwen3_next_hparams(file) : read_qwen35_hparams(file);
  char const* family = next ? "qwen3next" : "qwen35";
  check_qwen35_hparams(hp, family);
  if (!has_qwen35_mtp(file, hp)) throw error("tf: this {} model carries no MTP head", family);
  int const at = hp.num_layers;  // the MTP block follows the decoder layers
  if (auto const* g = file.gguf()) {
    tensor_binder<model::gguf_file, decltype(qwen35_tensors), B> const b{
        *g, qwen35_tensors, name_style::gguf, family, be};
    return qwen35_detail::bind_mtp(b, hp, at);
  }
  qwen35_mtp_hf_view<model::hf_model> const view{*file.hf(), at};
  tensor_binder<decltype(view), decltype(qwen35_tensors), B> const b{view, qwen35_tensors,
                                                                     name_style::hf, family, be};
  return qwen35_detail::bind_mtp(b, hp, at);
}

/// The head's forward (tf::mtp_head) on backend B.
template <class B>
class qwen35_mtp_head final : public mtp_head {
 public:
  /// The head of `file` (which must outlive it) on a backend of options `o`; `next`: a
  /// Qwen3-Next file.
  qwen35_mtp_head(model::model_file const& file, bool next, typename B::options o)
      : be_(std::move(o)), w_(load_qwen35_mtp_weights(file, be_, next)) {
    auto const& hp = w_.hp;
    attn_ = {hp.num_heads, hp.num_kv_heads, hp.head_dim, 0.0f, 0, 0.0f};
    rope_ = {backend::rope_kind::neox, hp.rotary_dims, hp.rope_theta, 1.0f};
    routing_ = {backend::routing_kind::softmax_top_k, hp.num_experts, hp.num_experts_per_tok,
                hp.norm_topk_prob, 1.0f};
    set_streams(256, 1);
  }

  std::int64_t hidden_size() const override { return w_.hp.hidden_size; }
  std::int64_t vocab_size() const override { return w_.hp.vocab_size; }
  kv_shape kv() const override { return kv_.shape(); }
  std::uint64_t weight_bytes() const override {
    if constexpr (requires { be_.uploaded_bytes(); })
      return be_.uploaded_bytes();  // a device's copies
    else
      return 0;  // views of the mapped file
  }
  std::uint64_t store_bytes() const override {
    auto const k = kv_.shape();
    return static_cast<std::uint64_t>(k.num_pages) * static_cast<std::uint64_t>(k.page_tokens) *
           backend::kv_bytes_per_token(head_kv_layout(), k.dtype);
  }
  void set_streams(std::int32_t tokens, std::int32_t streams) override {
    auto s = one_stream_shape(tokens, 64, kv_dtype::f32);
    s.num_pages *= streams;
    kv_ = be_.make_kv_store(s, head_kv_layout());
  }

  void forward(std::span<batch_row const> rows, float const* hidden, float* logits,
               float* hidden_out) override {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    auto const& s = be_.begin(rows, kv_, hp.vocab_size);
    layers::mtp_input(be_, s, w_.embd, w_.enorm, w_.hnorm, w_.fc, hidden, eps, in_, x_);
    auto const& L = w_.layer;
    be_.rmsnorm(x_, L.attn_norm, xn_, eps);
    attention(s, L.attn, o_);
    be_.residual(x_, o_, nullptr, &L.ffn_norm, eps);
    if (hp.is_moe(hp.num_layers))
      layers::moe(be_, s, L.moe, routing_, o_, xn_);
    else
      layers::gated_mlp(be_, s, L.mlp, backend::activation::silu, o_, xn_, mlp_);
    be_.residual(x_, xn_, nullptr, nullptr, eps);
    be_.capture_hidden(hidden_out);
    be_.logits(s, x_, w_.norm, w_.output, eps, 0.0f, logits);
    be_.capture_hidden(nullptr);
  }

 private:
  // The head's one attention layer.
  backend::kv_layout head_kv_layout() const { return {1, w_.hp.num_kv_heads, w_.hp.head_dim}; }

  // The decoder layer's gated attention, as qwen35_model's full-attention layers run it.
  void attention(typename B::step const& s, qwen35_attention_weights<B> const& w,
                 typename B::buffer& out) {
    int const hd = w_.hp.head_dim;
    float const eps = w_.hp.rms_norm_eps;
    be_.matmul_group({{w.q, qg_}, {w.k, k_}, {w.v, v_}}, xn_);
    be_.columns(qg_, q_, 0, hd, 2 * hd);  // per head [q | gate]
    be_.columns(qg_, gate_, hd, hd, 2 * hd);
    be_.rmsnorm_heads(q_, w.q_norm, hd, eps);
    be_.rmsnorm_heads(k_, w.k_norm, hd, eps);
    be_.rope(s, q_, hd, rope_);
    be_.rope(s, k_, hd, rope_);
    be_.kv_write(s, kv_, 0, k_, v_);
    be_.attend(s, kv_, 0, q_, att_, attn_);
    be_.sigmoid_gate(att_, gate_);
    be_.matmul(w.o, att_, out);
  }

  B be_;
  qwen35_mtp_weights<B> w_;
  typename B::kv_store kv_;
  backend::attention_params attn_;
  backend::rope_params rope_;
  backend::routing_params routing_;
  layers::mtp_input_buffers<B> in_;
  typename B::buffer x_, xn_, o_;
  typename B::buffer qg_, q_, gate_, k_, v_, att_;
  layers::mlp_buffers<B> mlp_;
};

/// The MTP head of `file` (which must outlive it) on a backend of options `o`, or null where the
/// file carries none or its family has no MTP head in tf.
template <class B>
std::unique_ptr<mtp_head> open_qwen35_mtp_head(model::model_file const& file,
                                               typename B::options o) {
  auto const arch = file.architecture();
  bool const next = arch == "qwen3next" || arch == "qwen3_next";
  bool const q35 = arch.starts_with("qwen35") || arch.starts_with("qwen3_5");
  if (!next && !q35) return nullptr;
  auto const hp = next ? read_qwen3_next_hparams(file) : read_qwen35_hparams(file);
  if (!has_qwen35_mtp(file, hp)) return nullptr;
  return std::make_unique<qwen35_mtp_head<B>>(file, next, std::move(o));
}

}  // namespace tf::families::qwen
