#pragma once
/// A tiny hybrid test family on the engine: an attention block and a recurrent block (a diagonal
/// linear recurrence, h = decay * h + W x, kept per stream in a state slot), each followed by a
/// SwiGLU MLP. Random weights made in memory; bound through the ledgerPool of the hybrid pool.
#include <tf/engine.hpp>
#include <tf/kv/hybrid_pool.hpp>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace tf::test {

struct tiny_hybrid_hparams {
  int vocab_size = 64;
  int hidden_size = 32;
  int intermediate_size = 48;
  int num_heads = 4;
  int num_kv_heads = 2;
  int head_dim = 8;
  float rms_norm_eps = 1e-6f;
  int context_length = 4096;
};

/// Weights on backend B; the floats behind them live in `storage`.
template <class B>
struct tiny_hybrid_weights {
  tiny_hybrid_hparams hp;
  std::shared_ptr<std::vector<std::vector<float>>> storage;
  typename B::matrix embd, rec_in, rec_out;
  typename B::vector attn_norm, rec_norm, ffn_norm[2], output_norm, decay;
  layers::attention_weights<B> attn;
  layers::mlp_weights<B> mlp[2];
};

template <class B>
class tiny_hybrid_model {
 public:
  using hparams = tiny_hybrid_hparams;
  using weights = tiny_hybrid_weights<B>;

  static backend::kv_layout kv_layout(hparams const& hp) {
    return {1, hp.num_kv_heads, hp.head_dim};  // one attention layer
  }
  static backend::state_layout state_layout(hparams const& hp) {
    return {1, hp.hidden_size};  // one recurrent layer
  }

  /// Random weights from `seed`, bound to `be`.
  static weights random(B& be, std::uint32_t seed) {
    weights w;
    auto const& hp = w.hp;
    w.storage = std::make_shared<std::vector<std::vector<float>>>();
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    auto mat = [&](std::int64_t rows, std::int64_t cols) {
      auto& v = w.storage->emplace_back(static_cast<std::size_t>(rows * cols));
      for (auto& x : v) x = normal(rng);
      return be.upload(backend::host_matrix{model::tensor_type::f32, rows, cols,
                                            reinterpret_cast<std::byte const*>(v.data()),
                                            static_cast<std::uint64_t>(cols) * 4u});
    };
    auto vec = [&](std::int64_t n, float lo, float hi) {
      std::uniform_real_distribution<float> u(lo, hi);
      std::vector<float> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = u(rng);
      return be.upload(std::move(v));
    };
    int const h = hp.hidden_size, ff = hp.intermediate_size, hd = hp.head_dim;
    w.storage->reserve(16);  // the matrices point into these vectors: no reallocation
    w.embd = mat(hp.vocab_size, h);
    w.attn.q = mat(hp.num_heads * hd, h);
    w.attn.k = mat(hp.num_kv_heads * hd, h);
    w.attn.v = mat(hp.num_kv_heads * hd, h);
    w.attn.o = mat(h, hp.num_heads * hd);
    w.rec_in = mat(h, h);
    w.rec_out = mat(h, h);
    for (auto& m : w.mlp) {
      m.gate = mat(ff, h);
      m.up = mat(ff, h);
      m.down = mat(h, ff);
    }
    w.attn_norm = vec(h, 0.8f, 1.2f);
    w.rec_norm = vec(h, 0.8f, 1.2f);
    w.ffn_norm[0] = vec(h, 0.8f, 1.2f);
    w.ffn_norm[1] = vec(h, 0.8f, 1.2f);
    w.output_norm = vec(h, 0.8f, 1.2f);
    w.decay = vec(h, 0.5f, 0.99f);
    return w;
  }

  explicit tiny_hybrid_model(weights w) : w_(std::move(w)) {}
  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::state_store& states,
               typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    float const eps = hp.rms_norm_eps;
    layers::attention_config const c{{hp.num_heads, hp.num_kv_heads, hp.head_dim}, {}, eps};
    be.embed(s, w_.embd, x_, 1.0f);
    // Block 0: attention.
    be.rmsnorm(x_, w_.attn_norm, xn_, eps);
    layers::attention(be, s, kv, 0, w_.attn, c, xn_, o_, att_);
    be.residual(x_, o_, nullptr, &w_.ffn_norm[0], eps);
    layers::gated_mlp(be, s, w_.mlp[0], backend::activation::silu, o_, xn_, mlp_);
    be.add(x_, xn_);
    // Block 1: the recurrence.
    be.rmsnorm(x_, w_.rec_norm, xn_, eps);
    be.matmul(w_.rec_in, xn_, o_);
    be.linear_recurrence(s, states, 0, o_, w_.decay);
    be.matmul(w_.rec_out, o_, xn_);
    be.residual(x_, xn_, nullptr, &w_.ffn_norm[1], eps);
    layers::gated_mlp(be, s, w_.mlp[1], backend::activation::silu, xn_, o_, mlp_);
    be.add(x_, o_);
    be.logits(s, x_, w_.output_norm, w_.embd, eps, 0.0f, logits);
  }

 private:
  weights w_;
  typename B::buffer x_, xn_, o_;
  layers::attention_buffers<B> att_;
  layers::mlp_buffers<B> mlp_;
};

/// The family's traits: recurrent-state slots beside KV pages, counted by the ledger.
struct tiny_hybrid {
  static constexpr std::string_view name = "tiny_hybrid";
  static constexpr std::array<std::string_view, 1> arch_names{"tf-tiny-hybrid"};
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = tiny_hybrid_hparams;
  template <class B>
  using model = tiny_hybrid_model<B>;
};

using tiny_hybrid_engine = engine<tiny_hybrid, backend::cpu>;

}  // namespace tf::test
