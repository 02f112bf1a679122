// kernels/cpu/attention_f16.hpp: llama.cpp's f16 attention steps, the same bits on every path.
#include <kernels/cpu/attention_f16.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace cpu = tf::kernels::cpu;
namespace af = tf::kernels::cpu::attention_f16;

namespace {

std::vector<std::uint16_t> random_f16(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = cpu::fp32_to_fp16(d(gen));
  return v;
}

std::vector<float> random_f32(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = cpu::fp16_to_fp32(cpu::fp32_to_fp16(d(gen)));
  return v;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

bool have_x86() {
  return cpu::default_isa() != cpu::isa::portable;
}

}  // namespace

TEST_CASE("exp is within 2 ulp of std::exp, 0 at -inf, and the same bits on every path") {
  std::vector<float> x;
  for (float v = -104.0f; v < 88.0f; v += 0.0137f) x.push_back(v);
  std::size_t const at_inf = x.size();
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(-90.0f);   // |n| > 126: the two-step scaling, into the subnormals
  x.push_back(-200.0f);  // |n| > 192: saturates to 0
  while (x.size() % 8) x.push_back(0.0f);
  std::vector<float> s(x), v(x);
  double const ss = af::scalar::exp_chunks(s.data(), static_cast<std::int64_t>(s.size()), 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    double const want = std::exp(static_cast<double>(x[i]));
    INFO("x = " << x[i]);
    if (want > 1e-37) CHECK(std::fabs(s[i] - want) <= 2.5e-7 * want);
  }
  CHECK(s[at_inf] == 0.0f);
  CHECK(std::fabs(s[at_inf + 1] - std::exp(-90.0)) <= 1e-3 * std::exp(-90.0));
  CHECK(s[at_inf + 2] == 0.0f);
#if TF_KERNELS_X86
  if (have_x86()) {
    double const vs = af::x86::exp_chunks(v.data(), static_cast<std::int64_t>(v.size()), 0.0f);
    CHECK(std::memcmp(&ss, &vs, sizeof ss) == 0);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(same_bits(s[i], v[i]));
  }
#endif
}

TEST_CASE("dot sums in ggml's f16 order: four 8-lane fma accumulators, then its fold") {
  std::mt19937 gen(11);
  for (std::int64_t n : {32, 256, 40}) {
    auto const k = random_f16(static_cast<std::size_t>(n), gen);
    auto const q = random_f32(static_cast<std::size_t>(n), gen);
    // The order written out: accumulator s of each 32-element step, then ((a0 + a2) + (a1 + a3))
    // per lane, lanes l + (l + 4), then pairs; a tail (n % 32) added in double.
    float a[32] = {};
    std::int64_t const whole = n - n % 32;
    for (std::int64_t i = 0; i < whole; ++i) {
      auto const s = static_cast<std::size_t>(i % 32);
      a[s] = std::fma(cpu::fp16_to_fp32(k[static_cast<std::size_t>(i)]),
                      q[static_cast<std::size_t>(i)], a[s]);
    }
    float l[8];
    for (int j = 0; j < 8; ++j) l[j] = (a[j] + a[16 + j]) + (a[8 + j] + a[24 + j]);
    double want = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
    for (std::int64_t i = whole; i < n; ++i)
      want += static_cast<double>(cpu::fp16_to_fp32(k[static_cast<std::size_t>(i)]) *
                                  q[static_cast<std::size_t>(i)]);
    INFO("n = " << n);
    CHECK(same_bits(af::scalar::dot(q.data(), k.data(), n), static_cast<float>(want)));
    CHECK(same_bits(af::dot(q.data(), k.data(), n), static_cast<float>(want)));
  }
}

TEST_CASE("the accumulators' fold is ggml's f16 dot over the keys of each element") {
  std::mt19937 gen(5);
  std::int64_t const hd = 24, keys = 70;
  std::vector<std::vector<std::uint16_t>> v;
  std::vector<float> p;
  for (std::int64_t j = 0; j < keys; ++j) {
    v.push_back(random_f16(static_cast<std::size_t>(hd), gen));
    p.push_back(std::fabs(random_f32(1, gen)[0]) / 8.0f);
  }
  std::vector<float> accumulators(static_cast<std::size_t>(af::key_accumulators * hd), 0.0f);
  for (std::int64_t j = 0; j < keys; ++j)
    af::scalar::add_to_accumulator(accumulators.data() + (j % af::key_accumulators) * hd,
                                   v[static_cast<std::size_t>(j)].data(),
                                   p[static_cast<std::size_t>(j)], hd);
  std::vector<float> out(static_cast<std::size_t>(hd));
  af::scalar::fold_accumulators(accumulators.data(), out.data(), hd);
  for (std::int64_t d = 0; d < hd; ++d) {
    // The same sum as dot over the keys (zero-padded to a whole cycle) of column d.
    std::vector<std::uint16_t> col(96, 0);
    std::vector<float> pp(96, 0.0f);
    for (std::int64_t j = 0; j < keys; ++j) {
      col[static_cast<std::size_t>(j)] =
          v[static_cast<std::size_t>(j)][static_cast<std::size_t>(d)];
      pp[static_cast<std::size_t>(j)] = p[static_cast<std::size_t>(j)];
    }
    INFO("d = " << d);
    CHECK(same_bits(out[static_cast<std::size_t>(d)], af::scalar::dot(pp.data(), col.data(), 96)));
  }
}

TEST_CASE("weighted_sum has the bits of its keys in accumulators then folded, on every path") {
  std::mt19937 gen(9);
  for (std::int64_t n : {256, 64, 24}) {
    for (std::int64_t m : {1, 5, 31, 32, 33, 70, 130}) {
      for (int first : {0, 7, 31}) {
        std::vector<std::vector<std::uint16_t>> v;
        std::vector<std::uint16_t const*> rows;
        std::vector<float> p;
        for (std::int64_t i = 0; i < m; ++i) {
          v.push_back(random_f16(static_cast<std::size_t>(n), gen));
          p.push_back(std::fabs(random_f32(1, gen)[0]) / 8.0f);
        }
        for (auto const& r : v) rows.push_back(r.data());
        std::vector<float> accumulators(static_cast<std::size_t>(af::key_accumulators * n), 0.0f);
        for (std::int64_t i = 0; i < m; ++i)
          af::scalar::add_to_accumulator(
              accumulators.data() + (first + i) % af::key_accumulators * n,
              rows[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(i)], n);
        std::vector<float> want(static_cast<std::size_t>(n)), got(want), got_s(want);
        af::scalar::fold_accumulators(accumulators.data(), want.data(), n);
        af::weighted_sum(rows.data(), p.data(), m, first, n, got.data());
        af::scalar::weighted_sum(rows.data(), p.data(), m, first, n, got_s.data());
        INFO("n = " << n << " m = " << m << " first accumulator " << first);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(got_s.data(), want.data(), got.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("dot_heads gives each head dot's bits") {
  std::mt19937 gen(3);
  for (std::int64_t n : {256, 40}) {
    auto const k = random_f16(static_cast<std::size_t>(n), gen);
    std::vector<std::vector<float>> q;
    for (int g = 0; g < 4; ++g) q.push_back(random_f32(static_cast<std::size_t>(n), gen));
    float const* qs[4] = {q[0].data(), q[1].data(), q[2].data(), q[3].data()};
    float out[4];
    af::dot_heads<4>(qs, k.data(), n, out);
    for (int g = 0; g < 4; ++g) CHECK(same_bits(out[g], af::dot(qs[g], k.data(), n)));
    af::dot_heads<2>(qs + 2, k.data(), n, out);
    CHECK(same_bits(out[1], af::scalar::dot(qs[3], k.data(), n)));
  }
}

TEST_CASE("dot_keys gives each head and key dot's bits, KP keys at a time and the rest alone") {
  std::mt19937 gen(13);
  auto check = [&](auto G, auto KP, std::int64_t n, std::int64_t nk) {
    constexpr int g_heads = decltype(G)::value, kp = decltype(KP)::value;
    std::vector<std::vector<std::uint16_t>> k;
    std::vector<std::vector<float>> q;
    std::vector<std::uint16_t const*> ks;
    float const* qs[g_heads];
    for (std::int64_t j = 0; j < nk; ++j) k.push_back(random_f16(static_cast<std::size_t>(n), gen));
    for (int g = 0; g < g_heads; ++g) q.push_back(random_f32(static_cast<std::size_t>(n), gen));
    for (auto const& r : k) ks.push_back(r.data());
    for (int g = 0; g < g_heads; ++g) qs[g] = q[static_cast<std::size_t>(g)].data();
    std::int64_t const stride = nk + 3;
    std::vector<float> out(static_cast<std::size_t>(g_heads * stride), -1.0f);
    af::dot_keys<g_heads, kp>(qs, ks.data(), nk, n, out.data(), stride);
    INFO("G = " << g_heads << " KP = " << kp << " n = " << n << " keys " << nk);
    for (int g = 0; g < g_heads; ++g) {
      for (std::int64_t j = 0; j < nk; ++j)
        CHECK(same_bits(out[static_cast<std::size_t>(g * stride + j)],
                        af::scalar::dot(qs[g], ks[static_cast<std::size_t>(j)], n)));
      for (std::int64_t j = nk; j < stride; ++j)
        CHECK(out[static_cast<std::size_t>(g * stride + j)] == -1.0f);
    }
  };
  using std::integral_constant;
  for (std::int64_t n : {256, 64, 32, 40})
    for (std::int64_t nk : {1, 2, 3, 8, 9, 17}) {
      check(integral_constant<int, 4>{}, integral_constant<int, 2>{}, n, nk);
      check(integral_constant<int, 2>{}, integral_constant<int, 4>{}, n, nk);
      check(integral_constant<int, 1>{}, integral_constant<int, 8>{}, n, nk);
      check(integral_constant<int, 4>{}, integral_constant<int, 1>{}, n, nk);
    }
}

TEST_CASE("weighted_sum_heads gives each head scalar weighted_sum's bits, every first_acc") {
  std::mt19937 gen(17);
  auto check = [&](auto G, std::int64_t n, std::int64_t m, int first) {
    constexpr int g_heads = decltype(G)::value;
    std::vector<std::vector<std::uint16_t>> v;
    std::vector<std::uint16_t const*> rows;
    for (std::int64_t i = 0; i < m; ++i) v.push_back(random_f16(static_cast<std::size_t>(n), gen));
    for (auto const& r : v) rows.push_back(r.data());
    std::vector<std::vector<float>> p(g_heads), got(g_heads), want(g_heads);
    float const* ps[g_heads];
    float* outs[g_heads];
    for (int g = 0; g < g_heads; ++g) {
      auto& pg = p[static_cast<std::size_t>(g)];
      for (std::int64_t i = 0; i < m; ++i) pg.push_back(std::fabs(random_f32(1, gen)[0]) / 8.0f);
      got[static_cast<std::size_t>(g)].assign(static_cast<std::size_t>(n), 0.0f);
      want[static_cast<std::size_t>(g)].assign(static_cast<std::size_t>(n), 0.0f);
      ps[g] = pg.data();
      outs[g] = got[static_cast<std::size_t>(g)].data();
    }
    af::weighted_sum_heads<g_heads>(rows.data(), ps, m, first, n, outs);
    for (int g = 0; g < g_heads; ++g) {
      auto const& w = want[static_cast<std::size_t>(g)];
      af::scalar::weighted_sum(rows.data(), ps[g], m, first, n,
                               want[static_cast<std::size_t>(g)].data());
      INFO("G = " << g_heads << " n = " << n << " m = " << m << " first accumulator " << first
                  << " head " << g);
      CHECK(std::memcmp(outs[g], w.data(), w.size() * sizeof(float)) == 0);
    }
  };
  using std::integral_constant;
  for (std::int64_t n : {512, 256, 64, 24})
    for (std::int64_t m : {1, 2, 7, 31, 32, 33, 95, 131})
      for (int first = 0; first < af::key_accumulators; ++first) {
        check(integral_constant<int, 4>{}, n, m, first);
        check(integral_constant<int, 2>{}, n, m, first);
        check(integral_constant<int, 1>{}, n, m, first);
      }
  // A span past 512 KiB of values, whose rows the AVX-512 path asks for ahead.
  for (int first : {0, 13}) {
    check(integral_constant<int, 4>{}, 256, 1100, first);
    check(integral_constant<int, 1>{}, 256, 1100, first);
  }
}
