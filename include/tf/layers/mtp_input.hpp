#pragma once
/// The input of an MTP head's decoder layer, on the CPU backend: x = fc(concat(enorm(embed(t)),
/// hnorm(h))) for each token t of the step and its hidden state h (Qwen3.5 / Qwen3-Next's mtp.fc,
/// GLM-4.5's eh_proj; DeepSeek-V3's MTP modules have the same shape).
#include <tf/backend/cpu.hpp>

#include <algorithm>
#include <cstdint>

namespace tf::layers {

/// What mtp_input() writes between its steps.
struct mtp_input_buffers {
  backend::cpu::buffer e, en, h, hn, cat;
};

/// x [tokens, hidden] from the step's tokens and `hidden` [tokens, hidden].
inline void mtp_input(backend::cpu& be, backend::cpu::step const& s,
                      backend::cpu::matrix const& embd, backend::cpu::vector const& enorm,
                      backend::cpu::vector const& hnorm, backend::cpu::matrix const& fc,
                      float const* hidden, float eps, mtp_input_buffers& b,
                      backend::cpu::buffer& x) {
  be.embed(s, embd, b.e, 1.0f);
  std::int64_t const n = b.e.rows, h = b.e.cols;
  b.h.rows = n;
  b.h.cols = h;
  b.h.data.assign(hidden, hidden + n * h);
  be.rmsnorm(b.e, enorm, b.en, eps);
  be.rmsnorm(b.h, hnorm, b.hn, eps);
  b.cat.rows = n;
  b.cat.cols = 2 * h;
  b.cat.data.resize(static_cast<std::size_t>(n * 2 * h));
  // [embedding | hidden]: the order the checkpoints' fc columns follow.
  for (std::int64_t t = 0; t < n; ++t) {
    std::copy_n(b.en.data.data() + t * h, h, b.cat.data.data() + t * 2 * h);
    std::copy_n(b.hn.data.data() + t * h, h, b.cat.data.data() + t * 2 * h + h);
  }
  be.matmul(fc, b.cat, x);
}

}  // namespace tf::layers
