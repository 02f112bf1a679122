#pragma once
/// Gemma 4's assistant drafter (GGUF `gemma4-assistant`, as llama.cpp's converter writes
/// Gemma4AssistantForCausalLM): x = pre(concat(target_embd(t) * sqrt(target hidden), h)), a few
/// decoder layers whose attention has only queries and reads the target's KV (sliding layers the
/// target's last sliding layer, full layers its last full layer), sandwich norms, a GeGLU MLP and
/// a layer scalar each; then its own norm, its own tied head for the logits, and post(x) as the
/// hidden state of its next step. It keeps no KV: every step of a draft runs at the position of
/// the stream's pending token.
#include <families/common/gguf_layer_values.hpp>
#include <families/common/tensor_binder.hpp>
#include <families/gemma/gemma3_weights.hpp>
#include <families/gemma/gemma4_config.hpp>
#include <families/gemma/gemma4_weights.hpp>
#include <kernels/cpu/dequant.hpp>
#include <tf/backend/backend.hpp>
#include <tf/engine/target_kv_head.hpp>
#include <tf/error.hpp>
#include <tf/layers/mlp.hpp>
#include <tf/model/model_file.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf::families::gemma {

/// The architecture name of the assistant's GGUF.
inline constexpr std::string_view gemma4_assistant_arch = "gemma4-assistant";

struct gemma4_assistant_hparams {
  int hidden_size = 0;    // the assistant's own width
  int backbone_size = 0;  // the target's hidden size: the width of the states it reads and writes
  int num_layers = 0;
  int vocab_size = 0;
  int head_dim = 0;         // sliding layers
  int global_head_dim = 0;  // full layers
  std::vector<int> heads, ffn_widths;
  std::vector<char> sliding;
  int sliding_window = 0;
  float rope_theta_local = 1e4f, rope_theta_global = 1e6f;
  float partial_rotary_factor = 1.0f;
  float rms_norm_eps = 1e-6f;

  bool is_sliding(int l) const { return sliding[static_cast<std::size_t>(l)] != 0; }
  int layer_head_dim(int l) const { return is_sliding(l) ? head_dim : global_head_dim; }
};

/// Reads the `gemma4-assistant.*` keys. Throws tf::error on a missing key or another
/// architecture.
template <class Gguf>
gemma4_assistant_hparams gemma4_assistant_hparams_from_gguf(Gguf const& g) {
  std::string const arch(g.architecture());
  if (arch != gemma4_assistant_arch)
    throw error("tf: expected a {} GGUF, general.architecture is '{}'", gemma4_assistant_arch,
                arch);
  auto key = [&](char const* k) { return arch + "." + k; };
  auto need_int = [&](char const* k) {
    auto v = g.get_int(key(k));
    if (!v) throw error("tf: {} GGUF lacks the metadata key {}", arch, key(k));
    return static_cast<int>(*v);
  };
  auto per_layer = [&](char const* k, int n) {
    auto const v = gguf_layer_values(g, key(k), n, arch);
    if (v.size() != static_cast<std::size_t>(n))
      throw error("tf: {} GGUF {} lists {} values for {} layers", arch, key(k), v.size(), n);
    return std::vector<int>(v.begin(), v.end());
  };
  gemma4_assistant_hparams hp;
  hp.hidden_size = need_int("embedding_length");
  hp.backbone_size = need_int("embedding_length_out");
  hp.num_layers = need_int("block_count");
  hp.global_head_dim = need_int("attention.key_length");
  hp.head_dim = static_cast<int>(g.get_int(key("attention.key_length_swa")).value_or(0));
  hp.heads = per_layer("attention.head_count", hp.num_layers);
  hp.ffn_widths = per_layer("feed_forward_length", hp.num_layers);
  hp.sliding_window = need_int("attention.sliding_window");
  hp.rms_norm_eps =
      static_cast<float>(g.get_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-6));
  hp.rope_theta_global = static_cast<float>(g.get_float(key("rope.freq_base")).value_or(1e6));
  hp.rope_theta_local = static_cast<float>(g.get_float(key("rope.freq_base_swa")).value_or(1e4));
  auto const swa = g.get_bool_array(key("attention.sliding_window_pattern"));
  if (swa.size() != static_cast<std::size_t>(hp.num_layers))
    throw error("tf: {} GGUF {} lists {} layers of {}", arch,
                key("attention.sliding_window_pattern"), swa.size(), hp.num_layers);
  hp.sliding.assign(swa.begin(), swa.end());
  hp.partial_rotary_factor = gemma4_partial_rotary(g, hp.global_head_dim);
  auto const* emb = g.find_tensor("token_embd.weight");
  if (!emb || emb->dims.size() != 2) throw error("tf: {} GGUF lacks a 2-D token_embd.weight", arch);
  hp.vocab_size = static_cast<int>(emb->dims[1]);
  return hp;
}

/// One assistant layer: attention with queries only, sandwich norms, a GeGLU MLP.
template <class B>
struct gemma4_assistant_layer {
  typename B::vector attn_norm, q_norm, post_attn_norm, ffn_norm, post_ffw_norm;
  typename B::matrix q, o;
  layers::mlp_weights<B> mlp;
  float layer_scalar = 1.0f;
};

template <class B>
struct gemma4_assistant_weights {
  gemma4_assistant_hparams hp;
  typename B::matrix output;  // its own embedding, read only as the tied head
  typename B::vector output_norm;
  typename B::matrix pre;   // [hidden, 2 backbone] over [target embedding | target hidden]
  typename B::matrix post;  // [backbone, hidden]
  std::vector<gemma4_assistant_layer<B>> layers;
};

/// Binds the assistant's weights in `g` (which must outlive them) to `be`.
template <class Gguf, class B>
gemma4_assistant_weights<B> bind_gemma4_assistant(Gguf const& g, B& be) {
  gemma4_assistant_weights<B> w;
  w.hp = gemma4_assistant_hparams_from_gguf(g);
  auto const& hp = w.hp;
  if (hp.hidden_size <= 0 || hp.backbone_size <= 0 || hp.num_layers <= 0 || hp.vocab_size <= 0 ||
      hp.global_head_dim <= 0 || hp.sliding_window < 2)
    throw error(
        "tf: {} hparams are inconsistent: hidden {} backbone {} layers {} vocab {} "
        "head_dim {} window {}",
        gemma4_assistant_arch, hp.hidden_size, hp.backbone_size, hp.num_layers, hp.vocab_size,
        hp.global_head_dim, hp.sliding_window);
  tensor_binder<Gguf, std::remove_reference_t<decltype(gemma4_tensors)>, B> const b{
      g, gemma4_tensors, name_style::gguf, "gemma4-assistant", be};
  if (b.ranks().split())
    throw error("tf: the Gemma 4 assistant runs beside a target on one rank, not split");
  std::int64_t const h = hp.hidden_size, bb = hp.backbone_size;
  auto named = [&](std::string const& name) {
    auto const* t = g.find_tensor(name);
    if (!t) throw error("tf: {} model lacks the tensor {}", gemma4_assistant_arch, name);
    return t;
  };
  w.output = b.head(tensor_role::token_embd, hp.vocab_size, h);
  w.output_norm = b.norm(tensor_role::output_norm, 0, h);
  w.pre = be.upload(b.host_of(named("nextn.pre_projection.weight"), h, 2 * bb));
  w.post = be.upload(b.host_of(named("nextn.post_projection.weight"), bb, h));
  for (int i = 0; i < hp.num_layers; ++i) {
    std::int64_t const hd = hp.layer_head_dim(i), ff = hp.ffn_widths[static_cast<std::size_t>(i)];
    std::int64_t const q_out = hd * hp.heads[static_cast<std::size_t>(i)];
    if (hd <= 0) throw error("tf: {} layer {} has no head_dim", gemma4_assistant_arch, i);
    auto& l = w.layers.emplace_back();
    l.attn_norm = b.norm(tensor_role::attn_norm, i, h);
    l.q_norm = b.norm(tensor_role::attn_q_norm, i, hd);
    l.post_attn_norm = b.norm(tensor_role::post_attention_norm, i, h);
    l.ffn_norm = b.norm(tensor_role::ffn_norm, i, h);
    l.post_ffw_norm = b.norm(tensor_role::post_ffw_norm, i, h);
    l.q = b.mat(tensor_role::attn_q, i, q_out, h);
    l.o = b.mat(tensor_role::attn_output, i, h, q_out);
    l.mlp.gate = b.mat(tensor_role::ffn_gate, i, ff, h);
    l.mlp.up = b.mat(tensor_role::ffn_up, i, ff, h);
    l.mlp.down = b.mat(tensor_role::ffn_down, i, h, ff);
    if (auto const* s = g.find_tensor(model::expand(gemma4_layer_scalar.gguf, i))) {
      if (s->elements() != 1)
        throw error("tf: {} {} has {} elements", gemma4_assistant_arch, s->name, s->elements());
      kernels::cpu::dequantize_row(s->type, s->data, &l.layer_scalar, 1);
    }
  }
  return w;
}

/// The assistant's forward (tf::target_kv_head) on backend B, beside a Gemma 4 target: it runs on
/// the target's backend object between the target's rounds and reads the target's embedding and
/// KV store, which must outlive it.
template <class B>
class gemma4_assistant final : public target_kv_head {
 public:
  /// The assistant in `path` (mapped) beside the target of weights `target` and KV `kv`.
  gemma4_assistant(std::filesystem::path const& path, B& be, typename B::kv_store const& kv,
                   gemma4_weights<B> const& target)
      : file_(model::model_file::open(path, model::load_mode::map)),
        be_(be),
        kv_(kv),
        target_(target) {
    auto const* g = file_.gguf();
    if (!g)
      throw error(
          "tf: {}: the Gemma 4 assistant is read from a GGUF (llama.cpp's converter "
          "writes one from Gemma4AssistantForCausalLM)",
          path.string());
    auto const before = uploaded();
    w_ = bind_gemma4_assistant(*g, be_);
    weight_bytes_ = uploaded() - before;
    check_target();
    for (int l = 0; l < w_.hp.num_layers; ++l) layer_config(l);
  }

  std::int64_t hidden_size() const override { return w_.hp.backbone_size; }
  std::int64_t vocab_size() const override { return w_.hp.vocab_size; }
  std::uint64_t weight_bytes() const override { return weight_bytes_; }
  gemma4_assistant_hparams const& hparams() const { return w_.hp; }

  void forward(std::span<batch_row const> rows, float const* hidden, float* logits,
               float* hidden_out) override {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    // The rows as they attend: one position earlier, so that each sees the target's keys before
    // its own position and not the one there (a rejected draft's, or none yet).
    earlier_.assign(rows.begin(), rows.end());
    for (auto& r : earlier_) {
      if (r.tokens.size() != 1 || r.start_pos < 1)
        throw error(
            "tf: an assistant row is one token after at least one target position (got "
            "{} at {})",
            r.tokens.size(), r.start_pos);
      --r.start_pos;
    }
    auto const n = static_cast<std::int64_t>(rows.size());
    auto const* s = &be_.begin(rows, kv_, hp.vocab_size);
    be_.embed(*s, target_.embd, e_, std::sqrt(static_cast<float>(hp.backbone_size)));
    be_.load(h_, hidden, n, hp.backbone_size);
    be_.join_columns(e_, h_, cat_);  // [embedding | hidden]: the order pre's columns follow
    be_.matmul(w_.pre, cat_, x_);
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      auto const& c = configs_[static_cast<std::size_t>(l)];
      int const hd = c.attn.head_dim;
      be_.rmsnorm(x_, L.attn_norm, xn_, eps);
      be_.matmul(L.q, xn_, q_);
      be_.rmsnorm_heads(q_, L.q_norm, hd, eps);
      be_.rope(*s, q_, hd, c.rope);
      be_.attend(be_.begin(earlier_, kv_, hp.vocab_size), kv_, c.target_layer, q_, att_, c.attn);
      s = &be_.begin(rows, kv_, hp.vocab_size);
      be_.matmul(L.o, att_, o_);
      be_.residual(x_, o_, &L.post_attn_norm, &L.ffn_norm, eps);
      layers::gated_mlp(be_, *s, L.mlp, backend::activation::gelu_tanh, o_, xn_, mlp_);
      be_.residual(x_, xn_, &L.post_ffw_norm, nullptr, eps);
      if (L.layer_scalar != 1.0f) be_.scale(x_, L.layer_scalar);
    }
    be_.logits(*s, x_, w_.output_norm, w_.output, eps, 0.0f, logits);
    // The next step's state: post(norm(x)), the normed rows the head read.
    if (hidden_out) be_.logits(*s, x_, w_.output_norm, w_.post, eps, 0.0f, hidden_out);
  }

 private:
  struct layer_attention {
    backend::attention_params attn;
    backend::rope_params rope;
    int target_layer = 0;
  };

  std::uint64_t uploaded() const {
    if constexpr (requires { be_.uploaded_bytes(); })
      return be_.uploaded_bytes();  // a device's copies
    else
      return 0;  // views of the mapped file
  }

  // The last target layer of the kind of assistant layer `l` (sliding or full): its KV is what
  // the layer reads.
  int target_layer_of(int l) const {
    auto const& t = target_.hp;
    for (int j = t.num_layers - 1; j >= 0; --j)
      if (t.is_sliding(j) == w_.hp.is_sliding(l)) return j;
    return -1;
  }

  void check_target() const {
    auto const& hp = w_.hp;
    auto const& t = target_.hp;
    if (hp.backbone_size != t.hidden_size || hp.vocab_size != t.vocab_size)
      throw error(
          "tf: this Gemma 4 assistant drafts for a target of hidden size {} and "
          "vocabulary {}, not {} and {}",
          hp.backbone_size, hp.vocab_size, t.hidden_size, t.vocab_size);
    if (hp.sliding_window != t.sliding_window)
      throw error("tf: the Gemma 4 assistant's sliding window {} is not its target's {}",
                  hp.sliding_window, t.sliding_window);
  }

  void layer_config(int l) {
    auto const& hp = w_.hp;
    auto const& t = target_.hp;
    int const tl = target_layer_of(l);
    bool const sliding = hp.is_sliding(l);
    int const hd = hp.layer_head_dim(l), heads = hp.heads[static_cast<std::size_t>(l)];
    if (tl < 0 || t.layer_head_dim(tl) != hd || heads % t.layer_kv_heads(tl) != 0)
      throw error(
          "tf: Gemma 4 assistant layer {} ({}, {} heads of {}) finds no target layer of "
          "its kind and head size to read",
          l, sliding ? "sliding" : "full", heads, hd);
    layer_attention c;
    c.target_layer = tl;
    // The rows attend one position early: a window one shorter keeps the same first key.
    c.attn = {heads, t.layer_kv_heads(tl), hd, 1.0f, sliding ? hp.sliding_window - 1 : 0, 0.0f};
    if (sliding) {
      c.rope = {backend::rope_kind::neox, 0, hp.rope_theta_local, 1.0f, 0};
    } else {
      int const pairs = static_cast<int>(hp.partial_rotary_factor * hd / 2);
      c.rope = {pairs > 0 ? backend::rope_kind::neox : backend::rope_kind::none, 0,
                hp.rope_theta_global, 1.0f, pairs};
    }
    configs_.push_back(c);
  }

  model::model_file file_;
  B& be_;
  typename B::kv_store const& kv_;
  gemma4_weights<B> const& target_;
  gemma4_assistant_weights<B> w_;
  std::uint64_t weight_bytes_ = 0;
  std::vector<layer_attention> configs_;
  std::vector<batch_row> earlier_;
  typename B::buffer e_, h_, cat_, x_, xn_, q_, att_, o_;
  layers::mlp_buffers<B> mlp_;
};

}  // namespace tf::families::gemma
