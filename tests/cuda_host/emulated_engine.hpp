#pragma once
// What the emulated-backend tests share: an engine of a file's family over a backend, one
// forward's logits cut per row, greedy generation, deterministic token sequences, and a bitwise
// comparison of logits.
#include <tf/batch.hpp>
#include <tf/engine.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <utility>
#include <vector>

namespace tf::test::emulated {

/// fn(engine) for an engine<F, B> of the file's family over `kv`, with backend options `o`.
template <class B, class Fn>
void with_engine(std::filesystem::path const& path, kv_shape kv, typename B::options o, Fn&& fn) {
  auto file = model::model_file::open(path, model::load_mode::map);
  with_family<families::builtin, B>(file, [&](auto t) {
    engine<typename decltype(t)::type, B> e(file, kv, o);
    fn(e);
  });
}

/// Logits [logits_rows(rows), vocab] of one forward.
template <class Engine>
std::vector<float> run(Engine& e, std::span<batch_row const> rows) {
  std::vector<float> out(static_cast<std::size_t>(logits_rows(rows) * e.vocab_size()));
  e.forward(rows, out.data());
  return out;
}

/// A deterministic token sequence of `n` ids below `vocab`, different per `seed`.
inline std::vector<std::int32_t> tokens(int seed, int n, std::int64_t vocab) {
  std::vector<std::int32_t> t;
  for (int i = 0; i < n; ++i)
    t.push_back(static_cast<std::int32_t>((17 + 31 * seed + 7 * i * i + 3 * i) % vocab));
  return t;
}

/// Greedy sampling without logprobs.
inline sample::sampling_params greedy() {
  sample::sampling_params p;
  p.temperature = 0.0f;
  p.logprobs = false;
  return p;
}

/// `n` greedy tokens after `prompt`.
inline std::vector<std::int32_t> generate(loaded_model& m, std::vector<std::int32_t> const& prompt,
                                          std::size_t n) {
  return m.generate(std::span<std::int32_t const>(prompt), greedy(), static_cast<int>(n), {}, false)
      .tokens;
}

/// One forward's logits `all` cut into each row's own (logits_rows of that row, times `vocab`).
inline std::vector<std::vector<float>> split_rows(std::vector<float> const& all,
                                                  std::span<batch_row const> rows,
                                                  std::int64_t vocab) {
  std::vector<std::vector<float>> out;
  std::size_t at = 0;
  for (auto const& row : rows) {
    auto const n = static_cast<std::size_t>(logits_rows({&row, 1}) * vocab);
    out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                     all.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return out;
}

inline bool same_bits(std::span<float const> a, std::span<float const> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

/// Steps 0..phases-1 of `step_rows(phase)` (batch rows) on two fresh engines of the file: one row
/// per forward, then each step's rows in one forward; every row's logits must match bit for bit.
template <class B, class StepRows>
void check_batched_equals_solo(std::filesystem::path const& path, kv_shape kv,
                               typename B::options o, int phases, StepRows&& step_rows) {
  std::vector<std::vector<std::vector<float>>> solo(static_cast<std::size_t>(phases)),
      batched(solo.size());
  with_engine<B>(path, kv, o, [&](auto& e) {
    for (std::size_t phase = 0; phase < solo.size(); ++phase)
      for (auto const& row : step_rows(static_cast<int>(phase)))
        solo[phase].push_back(run(e, {&row, 1}));
  });
  with_engine<B>(path, kv, o, [&](auto& e) {
    for (std::size_t phase = 0; phase < batched.size(); ++phase) {
      auto const rows = step_rows(static_cast<int>(phase));
      batched[phase] = split_rows(run(e, rows), rows, e.vocab_size());
    }
  });
  for (std::size_t phase = 0; phase < solo.size(); ++phase) {
    REQUIRE(batched[phase].size() == solo[phase].size());
    for (std::size_t r = 0; r < solo[phase].size(); ++r) {
      INFO("step " << phase << ", row " << r);
      CHECK(same_bits(batched[phase][r], solo[phase][r]));
    }
  }
}

}  // namespace tf::test::emulated
