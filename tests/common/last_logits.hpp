#pragma once
// The last logits of a prompt in one stream of a tf::loaded_model, and how far two logits rows are
// apart: what the backend tests compare between two backends, or between a prompt fed whole and in
// chunks.
#include <tests/common/hf_oracle.hpp>
#include <tf/batch.hpp>
#include <tf/engine/loaded_model.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tf::test {

/// The last logits after `prompt` in one stream from position 0 (in state slot 0 where the model
/// has recurrent state), fed `chunk` tokens a forward (0: all at once).
inline std::vector<float> last_logits(loaded_model& m, std::vector<std::int32_t> const& prompt,
                                      std::size_t chunk = 0) {
  auto const kv = m.kv();
  auto const pages = pages_in_order(kv.num_pages);
  std::vector<float> logits(static_cast<std::size_t>(m.vocab_size()));
  std::size_t const step = chunk > 0 ? chunk : prompt.size();
  for (std::size_t at = 0; at < prompt.size(); at += step) {
    std::span<std::int32_t const> const part(prompt.data() + at,
                                             std::min(step, prompt.size() - at));
    batch_row row{part, static_cast<std::int32_t>(at), pages, false,
                  kv.num_state_slots > 0 ? 0 : -1};
    m.forward({&row, 1}, logits.data());
  }
  return logits;
}

/// max |a - b| (a NaN counts as infinite) and max |a|.
struct distance {
  float diff = 0.0f, top = 0.0f;
};
inline distance compare(std::span<float const> a, std::span<float const> b) {
  distance d;
  for (std::size_t i = 0; i < a.size(); ++i) {
    float const e = std::fabs(a[i] - b[i]);
    d.diff = std::max(d.diff, std::isnan(e) ? std::numeric_limits<float>::infinity() : e);
    d.top = std::max(d.top, std::fabs(a[i]));
  }
  return d;
}

}  // namespace tf::test
