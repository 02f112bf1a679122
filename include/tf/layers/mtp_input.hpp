#pragma once
/// The input of an MTP head's decoder layer, on any backend that can take host rows (`load`) and
/// join two activations side by side (`join_columns`): x = fc(concat(enorm(embed(t)), hnorm(h)))
/// for each token t of the step and its hidden state h (Qwen3.5 / Qwen3-Next's mtp.fc, GLM-4.5's
/// eh_proj; DeepSeek-V3's MTP modules have the same shape).
#include <cstdint>

namespace tf::layers {

/// What mtp_input() writes between its steps.
template <class B>
struct mtp_input_buffers {
  typename B::buffer e, en, h, hn, cat;
};

/// x [tokens, hidden] from the step's tokens and `hidden` [tokens, hidden] (host memory).
template <class B>
void mtp_input(B& be, typename B::step const& s, typename B::matrix const& embd,
               typename B::vector const& enorm, typename B::vector const& hnorm,
               typename B::matrix const& fc, float const* hidden, float eps,
               mtp_input_buffers<B>& b, typename B::buffer& x) {
  be.embed(s, embd, b.e, 1.0f);
  be.load(b.h, hidden, b.e.rows, b.e.cols);
  be.rmsnorm(b.e, enorm, b.en, eps);
  be.rmsnorm(b.h, hnorm, b.hn, eps);
  be.join_columns(b.en, b.hn, b.cat);  // [embedding | hidden]: the order fc's columns follow
  be.matmul(fc, b.cat, x);
}

}  // namespace tf::layers
