#pragma once
/// The backend concept: the typed operations a family's forward is written in. A backend owns its
/// buffers (activations, the KV store) and its threads or streams; a forward holds only handles
/// and calls these operations, so one forward runs on every backend that models the concept.
#include <tf/batch.hpp>
#include <tf/memory/pool.hpp>

#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tf::backend {

/// Where the backend's memory lives: sizes the start-up budget.
using memory::memory_kind;

/// How q and k are rotated: NeoX pairs (i, i + dims/2), interleaved pairs (2i, 2i + 1), or not at
/// all (attention without positions, as Nemotron-H's).
enum class rope_kind : unsigned char { neox, interleaved, none };

/// RoPE over the first `dims` of each head (0: the whole head): angle = freq_scale * pos *
/// theta^(-2i / dims).
struct rope_params {
  rope_kind kind = rope_kind::neox;
  int dims = 0;
  float theta = 10000.0f;
  float freq_scale = 1.0f;
  int rotated_pairs = 0;  // pairs i >= this keep angle 0 (proportional RoPE); 0: every pair turns
};

/// Causal attention of `heads` query heads over `kv_heads` KV heads: softmax(scale q k) v, with
/// scale 1 / sqrt(head_dim) when 0; window > 0 lets a query at p see keys p - window + 1 .. p;
/// softcap > 0 caps the scores as softcap * tanh(s / softcap).
struct attention_params {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  int window = 0;
  float softcap = 0.0f;
};

/// The gate's activation in a gated MLP: act(gate x) * (up x).
enum class activation : unsigned char { gelu_tanh, silu, relu2 };

/// How a MoE layer picks experts for a token from its router logits.
enum class routing_kind : unsigned char {
  softmax_top_k,   // softmax, top k (Qwen3-MoE)
  sigmoid_groups,  // sigmoid + correction bias, best groups first, top k (GLM-4.5, DeepSeek-V3)
};

/// A MoE layer's routing: kind, k experts per token, renormalised weights times `scale`; groups
/// for sigmoid_groups; `act` is the experts' activation (gated, or act(up x) for experts without a
/// gate); `expert_scale`, when given, multiplies each pick's weight by its expert's factor.
struct routing_params {
  routing_kind kind = routing_kind::softmax_top_k;
  int experts = 0;
  int k = 0;
  bool normalize = true;
  float scale = 1.0f;
  int groups = 1;
  int top_groups = 1;
  activation act = activation::silu;
  std::span<float const> expert_scale{};  // [experts] or empty; host floats the weights own
};

/// A Mamba2 selective scan: `heads` heads of `head_dim` channels share B and C within each of
/// `groups` groups (head h uses group h / (heads / groups)) of `state_size`; dt is clamped to
/// [dt_min, dt_max] after softplus.
struct ssm_params {
  int heads = 0;
  int head_dim = 0;
  int groups = 1;
  int state_size = 0;
  float dt_min = 0.0f;
  float dt_max = 3.4e38f;
};

/// A gated delta rule (Gated DeltaNet): `k_heads` q/k heads of `k_dim`, `v_heads` value heads of
/// `v_dim`. Value head j reads k-head j % k_heads when `tiled` (llama.cpp's qwen35 GGUF order),
/// else j / (v_heads / k_heads) (the HF order).
struct delta_params {
  int k_heads = 0;
  int v_heads = 0;
  int k_dim = 0;
  int v_dim = 0;
  bool tiled = false;
  float norm_eps = 1e-6f;  // of the q and k L2 norms
};

/// One attention layer's KV: kv_heads x head_dim per position, or none of its own where it reads
/// the KV of the earlier layer `shares` (a KV-shared layer).
struct kv_layer_shape {
  int kv_heads = 0;
  int head_dim = 0;
  int shares = -1;
};

/// The KV store's shape: `layers` attention layers, each kv_heads x head_dim unless `per_layer`
/// (a model whose layers differ fills it, one entry per attention layer) says otherwise.
struct kv_layout {
  int layers = 0;  // layers with attention
  int kv_heads = 0;
  int head_dim = 0;
  std::vector<kv_layer_shape> per_layer = {};

  kv_layer_shape layer(int l) const {
    return per_layer.empty() ? kv_layer_shape{kv_heads, head_dim, -1}
                             : per_layer[static_cast<std::size_t>(l)];
  }
};

/// The recurrent-state store's per-slot shape: `floats` f32 of state for each recurrent layer
/// (a layer's ops each own a range of them: the conv window, then the scan state).
struct state_layout {
  int layers = 0;
  std::int64_t floats = 0;
};

/// Bytes of one state slot of `l` (f32 state).
constexpr std::uint64_t state_bytes_per_slot(state_layout l) {
  return static_cast<std::uint64_t>(l.layers) * static_cast<std::uint64_t>(l.floats) * 4u;
}

/// Bytes per position of K and V for every attention layer of `l` that holds its own.
inline std::uint64_t kv_bytes_per_token(kv_layout const& l, kv_dtype dtype) {
  std::uint64_t elems = 0;
  for (int i = 0; i < l.layers; ++i) {
    auto const s = l.layer(i);
    if (s.shares < 0)
      elems += static_cast<std::uint64_t>(s.kv_heads) * static_cast<std::uint64_t>(s.head_dim);
  }
  return 2ull * elems * (dtype == kv_dtype::f32 ? 4u : 2u);
}

// clang-format off
/// A backend: names itself and its memory, makes its stores and bound vectors, and runs the
/// operations every family's forward is written in (the dense transformer path). `step` is one
/// batch gathered for the device; `buffer` an activation [rows, cols]; `matrix` a bound weight;
/// `vector` a bound f32 vector (norm weights, biases); `kv_store` the paged KV; `state_store` the
/// recurrent-state slots. What only some families need (recurrent layers, routed experts, split
/// weights, sampling on the device) is a capability beside this core: backend/capabilities.hpp.
template <class B>
concept backend = requires {
  { B::name } -> std::convertible_to<std::string_view>;
  { B::memory } -> std::convertible_to<memory_kind>;
  typename B::options;
  typename B::matrix;
  typename B::vector;
  typename B::buffer;
  typename B::step;
  typename B::kv_store;
  typename B::state_store;
} && requires(B& be, typename B::step const& s, typename B::buffer& x,
              typename B::buffer const& cx, typename B::matrix const& w,
              typename B::vector const& v, typename B::kv_store& kv,
              typename B::kv_store const& ckv, std::span<batch_row const> rows, float* logits) {
  { be.upload(std::vector<float>{}) } -> std::same_as<typename B::vector>;
  { be.make_kv_store(kv_shape{}, kv_layout{}) } -> std::same_as<typename B::kv_store>;
  { be.make_state_store(std::int32_t{}, state_layout{}) } -> std::same_as<typename B::state_store>;
  { be.begin(rows, ckv, std::int64_t{}) } -> std::same_as<typename B::step const&>;
  be.embed(s, w, x, 1.0f);
  be.rmsnorm(cx, v, x, 1e-6f);
  be.rmsnorm_heads(x, v, 1, 1e-6f);
  be.residual(x, x, &v, &v, 1e-6f);
  be.add(x, cx);
  be.scale(x, 1.0f);
  be.matmul(w, cx, x);
  be.matmul_group({{w, x}}, cx);
  be.add_bias(x, v);
  be.rope(s, x, 1, rope_params{});
  be.kv_write(s, kv, 0, cx, cx);
  kv.copy_page(std::int32_t{}, std::int32_t{});
  be.attend(s, ckv, 0, cx, x, attention_params{});
  be.glu(s, activation::silu, x, cx);
  be.glu_merged(s, activation::silu, cx, x);
  be.activate(s, activation::relu2, x);
  be.sigmoid_gate(x, cx);
  be.columns(cx, x, std::int64_t{}, std::int64_t{}, std::int64_t{});
  be.logits(s, cx, v, w, 1e-6f, 0.0f, logits);
};
// clang-format on

}  // namespace tf::backend
