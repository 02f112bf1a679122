#pragma once
/// Qwen3-Next (qwen3next / HF qwen3_next, e.g. Qwen3-Next-80B-A3B): the family's traits. The
/// parent of Qwen3.5-MoE, run by its forward; what differs:
/// - the GDN input projections are interleaved per k-head group (HF in_proj_qkvz, in_proj_ba;
///   GGUF ssm_ba), copied on the host at load into Qwen3.5's flat qkv, z, b and a;
/// - its GGUF keeps value heads in HF's grouped order (head j reads k-head j / (nv / nk)), where
///   llama.cpp's qwen35 GGUFs tile them;
/// - RoPE is plain partial NeoX (no MRoPE sections);
/// - the router renormalises per norm_topk_prob, and mlp_only_layers / decoder_sparse_step make
///   some layers a dense SwiGLU.
#include <families/qwen/qwen3_next_model.hpp>
#include <tf/backend/capabilities.hpp>
#include <tf/family.hpp>
#include <tf/kv/hybrid_pool.hpp>

#include <array>
#include <string_view>

namespace tf::families::qwen {

struct qwen3_next {
  static constexpr std::string_view name = "qwen3_next";
  static constexpr std::array<std::string_view, 2> arch_names{"qwen3next", "qwen3_next"};
  using ledger_pool = tf::ledgerPool<tf::kv::hybrid_pool>;
  using backend_needs =
      tf::backend::needs<tf::backend::recurrent_layers, tf::backend::routed_experts>;
  static constexpr bool per_request_admission = true;
  using hparams = qwen35_hparams;
  template <class B>
  using model = qwen3_next_model<B>;
};

}  // namespace tf::families::qwen
