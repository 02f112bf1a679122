// The CUDA recurrent kernels' host emulations (kernels/cuda/recurrent_math.hpp) against the CPU
// backend, over resets of a used slot, continuations, single tokens and a resumed arbitrary state,
// on padded rows. conv1d must equal it bit for bit (the same sum in the same roundings, and the
// same exp on the host). The scans must agree within 1e-5 of 1 + |value|, outputs and the state
// left behind: their warps add fused products lane by lane and then across lanes in a butterfly,
// where the CPU adds unfused products in order.
#include <kernels/cuda/recurrent_math.hpp>
#include <tf/backend/cpu.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

namespace be_ns = tf::backend;
namespace rm = tf::kernels::cuda::recurrent_math;
using buffer = be_ns::cpu::buffer;

namespace {

constexpr float pad = std::numeric_limits<float>::quiet_NaN();
constexpr std::int64_t extra_cols = 3;  // each emulated row is this much wider than its data

std::vector<float> random_values(std::int64_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

buffer packed(std::vector<float> data, std::int64_t rows, std::int64_t cols) {
  return buffer{std::move(data), rows, cols};
}

// rows x cols of `data` in rows `cols + extra_cols` apart, the gaps NaN.
std::vector<float> padded(std::vector<float> const& data, std::int64_t rows, std::int64_t cols) {
  std::int64_t const ld = cols + extra_cols;
  std::vector<float> out(static_cast<std::size_t>(rows * ld), pad);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(data.begin() + r * cols, cols, out.begin() + r * ld);
  return out;
}

// The data of padded rows, after checking that no gap was written.
std::vector<float> unpadded(std::vector<float> const& rows_in, std::int64_t rows,
                            std::int64_t cols) {
  std::int64_t const ld = cols + extra_cols;
  std::vector<float> out;
  bool gaps_untouched = true;
  for (std::int64_t r = 0; r < rows; ++r) {
    auto const row = rows_in.begin() + r * ld;
    out.insert(out.end(), row, row + cols);
    gaps_untouched =
        gaps_untouched && std::all_of(row + cols, row + ld, [](float v) { return std::isnan(v); });
  }
  CHECK(gaps_untouched);
  return out;
}

// The largest |got - want| / (1 + |want|); infinite for a NaN or a size mismatch.
double worst_error(std::span<float const> got, std::span<float const> want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double const e = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(double(want[i])));
    if (std::isnan(e)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, e);
  }
  return worst;
}

constexpr double scan_tolerance = 1e-5;

// A CPU backend with one recurrent layer of `floats` in one slot, and each chunk's step.
struct rig {
  be_ns::cpu be{be_ns::cpu_options{1}};
  be_ns::cpu::kv_store kv;
  be_ns::cpu::state_store states;
  std::vector<std::int32_t> tokens = std::vector<std::int32_t>(64, 0);
  std::vector<std::int32_t> pages{0};

  explicit rig(std::int64_t floats)
      : kv(be.make_kv_store({1, 4096, tf::kv_dtype::f32, 1}, {0, 1, 1})),
        states(be.make_state_store(1, {1, floats})) {}

  be_ns::cpu::step const& step(std::int32_t start, std::int64_t n) {
    row_ = {std::span<std::int32_t const>(tokens).first(static_cast<std::size_t>(n)), start, pages,
            false, 0};
    return be.begin(std::span(&row_, 1), kv, 1);
  }

  float* slot(std::int64_t offset) { return states.at(0, 0) + offset; }

 private:
  tf::batch_row row_;
};

// A stream's chunks: the slot starts full of noise, so the first reset must clear it; a later
// reset reuses the slot; the last chunk resumes from an arbitrary state both sides are given.
struct chunk {
  std::int32_t start;
  std::int64_t n;
  bool fresh_state;  // both states set to the same random values first
};
std::vector<chunk> const plan{{0, 5, true},  {5, 1, false},  {6, 9, false},
                              {0, 3, false}, {3, 17, false}, {40, 4, true}};

// Sets the CPU slot and the emulation's state to the same random values.
void same_noise(float* cpu_state, std::vector<float>& emu_state, unsigned seed) {
  emu_state = random_values(static_cast<std::int64_t>(emu_state.size()), seed, 1.0f);
  std::copy(emu_state.begin(), emu_state.end(), cpu_state);
}

std::vector<float> slot_copy(float const* p, std::size_t n) {
  return {p, p + n};
}

}  // namespace

TEST_CASE("butterfly_sum adds the lanes' partials in the warp's xor tree") {
  std::array<float, rm::warp> p{};
  for (int l = 0; l < rm::warp; ++l) p[static_cast<std::size_t>(l)] = static_cast<float>(l + 1);
  CHECK(rm::butterfly_sum(p) == 528.0f);
  // In lane order these add to 1; the tree adds lane 16 to lane 0 first, where the 1 is lost.
  p.fill(0.0f);
  p[0] = 1.0f;
  p[8] = -16777216.0f;
  p[16] = 16777216.0f;
  CHECK(rm::butterfly_sum(p) == 0.0f);
  // Adjacent pairs first would lose the 1 into lane 1's 2^24; the tree keeps it.
  p.fill(0.0f);
  p[0] = 1.0f;
  p[1] = 16777216.0f;
  p[16] = -16777216.0f;
  CHECK(rm::butterfly_sum(p) == 1.0f);
}

TEST_CASE("with_lane_entries picks ceil(rows / 32) entries a lane for 1..256 rows") {
  int got = 0;
  CHECK(rm::with_lane_entries(40, [&](auto m) { got = decltype(m)::value; }));
  CHECK(got == 2);
  CHECK(rm::with_lane_entries(256, [&](auto m) { got = decltype(m)::value; }));
  CHECK(got == 8);
  CHECK(rm::with_lane_entries(1, [&](auto m) { got = decltype(m)::value; }));
  CHECK(got == 1);
  CHECK_FALSE(rm::with_lane_entries(0, [&](auto) { got = -1; }));
  CHECK_FALSE(rm::with_lane_entries(257, [&](auto) { got = -1; }));
  CHECK(got == 1);
}

TEST_CASE("the conv1d emulation equals the CPU backend bit for bit") {
  std::int64_t const c = 37, offset = 3;
  for (int kernel : {1, 4, 16})
    for (bool with_bias : {false, true}) {
      INFO("kernel " << kernel << ", bias and silu " << with_bias);
      auto const w = random_values(c * kernel, 1, 0.5f);
      auto const bias = random_values(c, 2, 0.5f);
      bool const silu = with_bias;
      std::int64_t const keep = (kernel - 1) * c;
      rig r(keep + offset);
      std::vector<float> window(static_cast<std::size_t>(keep));
      unsigned seed = 10;
      for (auto const& ch : plan) {
        INFO("chunk at " << ch.start << " of " << ch.n);
        if (ch.fresh_state) same_noise(r.slot(offset), window, ++seed);
        auto const x = random_values(ch.n * c, ++seed, 1.0f);
        buffer cpu = packed(x, ch.n, c);
        r.be.conv1d(r.step(ch.start, ch.n), r.states, 0, offset, cpu, w,
                    with_bias ? &bias : nullptr, silu);
        auto emu = padded(x, ch.n, c);
        rm::conv1d_row(emu.data(), c + extra_cols, ch.n, c, w.data(), kernel,
                       with_bias ? bias.data() : nullptr, silu, window.data(), ch.start == 0);
        CHECK(unpadded(emu, ch.n, c) == cpu.data);
        CHECK(window == slot_copy(r.slot(offset), window.size()));
      }
    }
}

TEST_CASE("the Mamba2 scan emulation matches the CPU backend, outputs and state") {
  struct config {
    be_ns::ssm_params p;
    unsigned seed;
  };
  for (auto const& [p, seed0] :
       {config{{4, 3, 2, 40, 0.0f, 3.4e38f}, 100}, config{{6, 2, 3, 7, 0.05f, 1.0f}, 200},
        config{{2, 5, 1, 64, 0.0f, 3.4e38f}, 300}}) {
    INFO("heads " << p.heads << " x " << p.head_dim << ", groups " << p.groups << ", state "
                  << p.state_size);
    std::int64_t const nh = p.heads, hd = p.head_dim, ds = p.state_size;
    std::int64_t const cols = nh * hd + 2 * p.groups * ds, floats = nh * hd * ds;
    auto const dt_bias = random_values(nh, seed0, 0.5f);
    auto a = random_values(nh, seed0 + 1, 1.0f);
    for (auto& v : a) v = -std::abs(v) - 0.1f;
    auto const d = random_values(nh, seed0 + 2, 1.0f);
    rig r(floats);
    std::vector<float> state(static_cast<std::size_t>(floats));
    unsigned seed = seed0 + 10;
    for (auto const& ch : plan) {
      INFO("chunk at " << ch.start << " of " << ch.n);
      if (ch.fresh_state) same_noise(r.slot(0), state, ++seed);
      auto const xbc = random_values(ch.n * cols, ++seed, 1.0f);
      auto const dt = random_values(ch.n * nh, ++seed, 1.0f);
      buffer y;
      r.be.ssm_scan(r.step(ch.start, ch.n), r.states, 0, 0, packed(xbc, ch.n, cols),
                    packed(dt, ch.n, nh), dt_bias, a, d, p, y);
      auto const xbc_emu = padded(xbc, ch.n, cols), dt_emu = padded(dt, ch.n, nh);
      std::vector<float> y_emu(static_cast<std::size_t>(ch.n * (nh * hd + extra_cols)), pad);
      rm::ssm_scan_row(p, xbc_emu.data(), cols + extra_cols, dt_emu.data(), nh + extra_cols,
                       dt_bias.data(), a.data(), d.data(), ch.n, state.data(), ch.start == 0,
                       y_emu.data(), nh * hd + extra_cols);
      CHECK(worst_error(unpadded(y_emu, ch.n, nh * hd), y.data) <= scan_tolerance);
      CHECK(worst_error(state, slot_copy(r.slot(0), state.size())) <= scan_tolerance);
    }
  }
}

TEST_CASE("the gated delta emulation matches the CPU backend, tiled or not, outputs and state") {
  struct config {
    be_ns::delta_params p;
    unsigned seed;
  };
  for (bool tiled : {false, true})
    for (auto [p, seed0] :
         {config{{2, 4, 40, 5, false, 1e-6f}, 400}, config{{3, 6, 64, 9, false, 1e-6f}, 500},
          config{{1, 2, 7, 3, false, 1e-5f}, 600}}) {
      p.tiled = tiled;
      INFO("tiled " << tiled << ", k-heads " << p.k_heads << " x " << p.k_dim << ", v-heads "
                    << p.v_heads << " x " << p.v_dim);
      std::int64_t const nk = p.k_heads, nv = p.v_heads, dk = p.k_dim, dv = p.v_dim;
      std::int64_t const cols = 2 * nk * dk + nv * dv, floats = nv * dk * dv, offset = 5;
      auto const dt_bias = random_values(nv, seed0, 0.5f);
      auto coef = random_values(nv, seed0 + 1, 1.0f);
      for (auto& v : coef) v = -std::abs(v) - 0.1f;
      rig r(floats + offset);
      std::vector<float> state(static_cast<std::size_t>(floats));
      unsigned seed = seed0 + 10;
      for (auto const& ch : plan) {
        INFO("chunk at " << ch.start << " of " << ch.n);
        if (ch.fresh_state) same_noise(r.slot(offset), state, ++seed);
        auto const qkv = random_values(ch.n * cols, ++seed, 1.0f);
        auto const b = random_values(ch.n * nv, ++seed, 1.0f);
        auto const a = random_values(ch.n * nv, ++seed, 1.0f);
        buffer out;
        r.be.gated_delta(r.step(ch.start, ch.n), r.states, 0, offset, packed(qkv, ch.n, cols),
                         packed(b, ch.n, nv), packed(a, ch.n, nv), dt_bias, coef, p, out);
        // b and a share one row stride, as the launcher takes them.
        std::vector<float> ba(static_cast<std::size_t>(ch.n * 2 * nv));
        for (std::int64_t t = 0; t < ch.n; ++t) {
          std::copy_n(b.begin() + t * nv, nv, ba.begin() + t * 2 * nv);
          std::copy_n(a.begin() + t * nv, nv, ba.begin() + t * 2 * nv + nv);
        }
        auto const qkv_emu = padded(qkv, ch.n, cols), ba_emu = padded(ba, ch.n, 2 * nv);
        std::vector<float> out_emu(static_cast<std::size_t>(ch.n * (nv * dv + extra_cols)), pad);
        rm::gated_delta_row(p, qkv_emu.data(), cols + extra_cols, ba_emu.data(), ba_emu.data() + nv,
                            2 * nv + extra_cols, dt_bias.data(), coef.data(), ch.n, state.data(),
                            ch.start == 0, out_emu.data(), nv * dv + extra_cols);
        CHECK(worst_error(unpadded(out_emu, ch.n, nv * dv), out.data) <= scan_tolerance);
        CHECK(worst_error(state, slot_copy(r.slot(offset), state.size())) <= scan_tolerance);
      }
    }
}
