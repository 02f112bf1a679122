#pragma once
// What the Qwen3.5 and Qwen3-Next forward tests share: one stream over a hybrid engine (attention
// and gated-delta layers) in its own pages and state slot, and the checks made with it: against
// the transformers oracle, a prompt fed in chunks, and streams batched beside each other.
#include <tests/common/hf_oracle.hpp>
#include <tf/batch.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tf::test::hybrid {

/// KV pages of 16 positions and `slots` state slots.
inline kv_shape shape(int pages, int slots) {
  return {pages, 16, kv_dtype::f32, slots};
}

/// Page ids first, first + stride, ... (11 pages: 176 positions).
inline std::vector<std::int32_t> pages_from(int first, int stride) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < 11; ++i) p.push_back(first + i * stride);
  return p;
}

/// One stream over all the engine's pages, in state slot 0.
template <class Engine>
using slot_stream = stream<Engine>;

/// Every prompt position's logits of an `Engine` over weights `w` within `tol` of transformers'
/// and top-1 agreeing at >= 90% of them; with `exact`, the 16 greedy tokens after the prompt
/// (decoded one at a time) are transformers' too.
template <class Engine, class Weights>
void check_oracle(Weights const& w, hf_oracle const& o, std::string const& what, float tol,
                  bool exact) {
  Engine fwd(w, shape(11, 1), {2});
  auto const fit = fit_to(o, [&](std::size_t p) {
    slot_stream<Engine> s{fwd};
    auto all = s.feed(o.prompts[p], true);
    auto const got = s.greedy(all, o.greedy[p].size());
    INFO(what << " prompt " << p << " (" << o.prompts[p].size() << " tokens)");
    CHECK(got.size() == 16);
    if (exact) CHECK(got == o.greedy[p]);
    return all;
  });
  INFO(what << ": " << fit << " (tolerance " << tol << ")");
  CHECK(fit.worst <= tol);
  CHECK(fit.agree >= fit.total * 9 / 10);
}

/// `prompt` (150 tokens or more) fed in chunks of 1, 7, 64 and whole to an `Engine` over
/// `load(path)`'s weights: the same last logits to the bit and the same 16 greedy tokens.
template <class Engine, class Load>
void check_chunking(std::string const& path, Load load, std::vector<std::int32_t> const& prompt) {
  REQUIRE(prompt.size() >= 150);
  auto file = model::model_file::open(path);
  Engine fwd(load(file), shape(11, 1), {2});
  slot_stream<Engine> s{fwd};
  auto const whole = s.prefill(prompt, prompt.size());
  auto const tokens = s.greedy(whole, 16);
  for (std::size_t chunk : {1, 7, 64}) {
    INFO(path << " chunks of " << chunk);
    auto const last = s.prefill(prompt, chunk);
    CHECK(last == whole);
    CHECK(s.greedy(last, 16) == tokens);
  }
}

/// Streams in one batch on an `Engine` over `load(path)`'s weights, each in its own state slot
/// and pages, give the bits each gives alone (slot 0, one thread): the oracle's prompt 1 whole
/// beside prompts 0 and 1 cut in two, then decoding together.
template <class Engine, class Load>
void check_batch(std::string const& path, Load load, hf_oracle const& o) {
  auto const& p0 = o.prompts[0];
  auto const& p1 = o.prompts[1];
  auto const V = static_cast<std::size_t>(o.vocab);
  auto file = model::model_file::open(path);
  auto const w = load(file);
  std::vector<std::vector<float>> solo_last;
  std::vector<std::vector<std::int32_t>> solo_tokens;
  {
    Engine f1(w, shape(11, 1), {1});
    slot_stream<Engine> s{f1};
    for (auto const* p : {&p0, &p1}) {
      solo_last.push_back(s.prefill(*p, p->size()));
      solo_tokens.push_back(s.greedy(solo_last.back(), 4));
    }
  }
  auto const row_of = [&](std::vector<float> const& out, std::size_t r) {
    return std::vector<float>(out.begin() + static_cast<std::ptrdiff_t>(r * V),
                              out.begin() + static_cast<std::ptrdiff_t>((r + 1) * V));
  };
  for (int threads : {1, 2}) {
    INFO(path << " threads " << threads);
    Engine fwd(w, shape(33, 4), {threads});
    auto const ta = pages_from(2, 3), tb = pages_from(0, 3), tc = pages_from(1, 3);
    std::size_t const cut0 = 5, cut1 = 7;
    std::vector<batch_row> first{{p1, 0, ta, false, 3},
                                 {std::span(p0).first(cut0), 0, tb, false, 0},
                                 {std::span(p1).first(cut1), 0, tc, false, 1}};
    std::vector<float> out(3 * V);
    fwd.forward(first, out.data());
    CHECK(row_of(out, 0) == solo_last[1]);
    std::vector<batch_row> second{
        {std::span(p0).subspan(cut0), static_cast<std::int32_t>(cut0), tb, false, 0},
        {std::span(p1).subspan(cut1), static_cast<std::int32_t>(cut1), tc, false, 1}};
    fwd.forward(second, out.data());
    CHECK(row_of(out, 0) == solo_last[0]);
    CHECK(row_of(out, 1) == solo_last[1]);
    // Decode the three streams together, greedy on each one's own logits.
    std::vector<std::int32_t> next{solo_tokens[1][0], solo_tokens[0][0], solo_tokens[1][0]};
    std::vector<std::vector<std::int32_t>> got(3);
    for (int step = 0; step < 3; ++step) {
      auto const at0 = static_cast<std::int32_t>(p0.size()) + step;
      auto const at1 = static_cast<std::int32_t>(p1.size()) + step;
      std::vector<batch_row> rows{{std::span(next).subspan(0, 1), at1, ta, false, 3},
                                  {std::span(next).subspan(1, 1), at0, tb, false, 0},
                                  {std::span(next).subspan(2, 1), at1, tc, false, 1}};
      fwd.forward(rows, out.data());
      for (std::size_t r = 0; r < 3; ++r) {
        next[r] = argmax(std::span<float const>(out).subspan(r * V, V));
        got[r].push_back(next[r]);
      }
    }
    auto const tail = [](std::vector<std::int32_t> const& t) {
      return std::vector<std::int32_t>(t.begin() + 1, t.end());
    };
    CHECK(got[0] == tail(solo_tokens[1]));
    CHECK(got[1] == tail(solo_tokens[0]));
    CHECK(got[2] == tail(solo_tokens[1]));
  }
}

}  // namespace tf::test::hybrid
