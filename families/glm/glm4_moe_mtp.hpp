#pragma once
/// GLM-4.5's next-n (MTP) layer as an MTP head: decoder layer num_layers of the checkpoint (HF
/// model.layers.{n}.*, GGUF blk.{n}.* with its nextn.* tensors): x =
/// eh_proj(concat(enorm(embed(t)), hnorm(h))), one GLM-4.5 MoE decoder layer, then shared_head.norm
/// and the target's head. Runs on any backend with `load` and `join_columns` (the CPU's and
/// CUDA's), with its own KV store.
#include <families/glm/glm4_moe_weights.hpp>
#include <kernels/cpu/dequant.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/mtp_head.hpp>
#include <tf/engine/stream.hpp>
#include <tf/error.hpp>
#include <tf/layers/attention.hpp>
#include <tf/layers/buffers.hpp>
#include <tf/layers/moe.hpp>
#include <tf/layers/mtp_input.hpp>
#include <tf/model/model_file.hpp>

#include <memory>
#include <string>
#include <utility>

namespace tf::families::glm {

/// The head's weights; matrices may point into the file, which must outlive them.
template <class B>
struct glm4_moe_mtp_weights {
  glm4_moe_hparams hp;
  typename B::matrix embd, output, eh_proj;  // eh_proj [hidden, 2 hidden] over [emb. | hidden]
  typename B::vector enorm, hnorm, norm;
  glm4_moe_layer_weights<B> layer;
};

namespace mtp_detail {

// The name of the next-n layer's own tensor `hf` (HF) or `gguf` (GGUF's nextn.*).
inline std::string nextn_name(bool hf, int at, char const* hf_name, char const* gguf_name) {
  return hf ? "model.layers." + std::to_string(at) + "." + hf_name + ".weight"
            : "blk." + std::to_string(at) + ".nextn." + gguf_name + ".weight";
}

template <class File>
model::tensor_view const* find(File const& f, std::string const& name, bool optional) {
  auto const* t = f.find_tensor(name);
  if (!t && !optional) throw error("tf: glm4_moe model lacks the MTP tensor {}", name);
  return t;
}

template <class File>
std::vector<float> floats(File const& f, std::string const& name, std::int64_t n) {
  auto const* t = find(f, name, false);
  if (t->elements() != n)
    throw error("tf: {} has {} elements, expected {}", name, t->elements(), n);
  std::vector<float> w(static_cast<std::size_t>(n));
  kernels::cpu::dequantize_row(t->type, t->data, w.data(), n);
  return w;
}

template <class File, class B>
glm4_moe_mtp_weights<B> bind(File const& file, glm4_moe_hparams hp, name_style style, B& be) {
  using model::tensor_role;
  check_moe_hparams(hp);
  bool const hf = style == name_style::hf;
  int const at = hp.num_layers;  // the next-n layer follows the decoder layers
  std::int64_t const h = hp.hidden_size;
  tensor_binder<File, decltype(glm4_moe_tensors), B> const b{file, glm4_moe_tensors, style,
                                                             "glm4_moe", be};
  glm4_moe_mtp_weights<B> w;
  w.hp = hp;
  w.embd = b.head(tensor_role::token_embd, hp.vocab_size, h);
  auto const* out = b.find(tensor_role::output, 0, true);
  w.output = out ? b.head_of(out, hp.vocab_size, h) : w.embd;
  // The decoder layers' binder reads layer `at` as one more decoder layer; only it is bound.
  w.layer = bind_moe_layer(b, hp, at);
  auto const* eh = find(file, nextn_name(hf, at, "eh_proj", "eh_proj"), false);
  if (eh->dims.size() != 2 || eh->dims[0] != 2 * h || eh->dims[1] != h)
    throw error("tf: glm4_moe tensor {} is not [{}, {}]", eh->name, h, 2 * h);
  w.eh_proj = be.upload(backend::host_matrix{
      eh->type, h, 2 * h, eh->data, model::row_bytes(eh->type, static_cast<std::uint64_t>(2 * h))});
  w.enorm = be.upload(floats(file, nextn_name(hf, at, "enorm", "enorm"), h));
  w.hnorm = be.upload(floats(file, nextn_name(hf, at, "hnorm", "hnorm"), h));
  // GGUF may leave the head's norm out: the model's output norm then serves.
  auto const norm = nextn_name(hf, at, "shared_head.norm", "shared_head_norm");
  w.norm = find(file, norm, !hf) ? be.upload(floats(file, norm, h))
                                 : b.vec(tensor_role::output_norm, 0, h);
  return w;
}

}  // namespace mtp_detail

/// Whether `file` (a GLM-4.5 model) carries its next-n layer (not only the placeholder some GGUFs
/// keep: the layer's attention too).
inline bool has_glm4_moe_mtp(model::model_file const& file, glm4_moe_hparams const& hp) {
  auto const at = std::to_string(hp.num_layers);
  if (auto const* g = file.gguf())
    return g->find_tensor("blk." + at + ".nextn.eh_proj.weight") &&
           g->find_tensor("blk." + at + ".attn_q.weight");
  return file.hf()->find_tensor("model.layers." + at + ".eh_proj.weight") != nullptr;
}

/// The head's weights of `file` bound to `be`.
template <class B>
glm4_moe_mtp_weights<B> load_glm4_moe_mtp_weights(model::model_file const& file, B& be) {
  auto const hp = read_moe_hparams(file);
  if (!has_glm4_moe_mtp(file, hp)) throw error("tf: this glm4_moe model carries no MTP head");
  if (auto const* g = file.gguf()) return mtp_detail::bind(*g, hp, name_style::gguf, be);
  return mtp_detail::bind(*file.hf(), hp, name_style::hf, be);
}

/// The head's forward (tf::mtp_head) on backend B.
template <class B>
class glm4_moe_mtp_head final : public mtp_head {
 public:
  /// The head of `file` (which must outlive it) on a backend of options `o`.
  glm4_moe_mtp_head(model::model_file const& file, typename B::options o)
      : be_(std::move(o)), w_(load_glm4_moe_mtp_weights(file, be_)) {
    auto const& hp = w_.hp;
    attn_ = {{hp.num_heads, hp.num_kv_heads, hp.head_dim},
             {backend::rope_kind::neox, hp.rope_dims, hp.rope_theta, 1.0f},
             hp.rms_norm_eps};
    routing_ = {backend::routing_kind::sigmoid_groups,
                hp.num_experts,
                hp.experts_per_tok,
                hp.norm_topk_prob,
                hp.routed_scaling_factor,
                hp.n_group,
                hp.topk_group};
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
    layers::mtp_input(be_, s, w_.embd, w_.enorm, w_.hnorm, w_.eh_proj, hidden, eps, in_, b_.x);
    auto const& L = w_.layer;
    be_.rmsnorm(b_.x, L.attn_norm, b_.xn, eps);
    layers::attention(be_, s, kv_, 0, L.attn, attn_, b_.xn, b_.o, b_.att);
    be_.residual(b_.x, b_.o, nullptr, &L.ffn_norm, eps);
    layers::moe(be_, s, L.moe, routing_, b_.o, b_.xn);
    be_.residual(b_.x, b_.xn, nullptr, nullptr, eps);
    be_.capture_hidden(hidden_out);
    be_.logits(s, b_.x, w_.norm, w_.output, eps, 0.0f, logits);
    be_.capture_hidden(nullptr);
  }

 private:
  // The head's one attention layer.
  backend::kv_layout head_kv_layout() const { return {1, w_.hp.num_kv_heads, w_.hp.head_dim}; }

  B be_;
  glm4_moe_mtp_weights<B> w_;
  typename B::kv_store kv_;
  layers::attention_config attn_;
  backend::routing_params routing_;
  layers::mtp_input_buffers<B> in_;
  layers::decoder_buffers<B> b_;
};

}  // namespace tf::families::glm
