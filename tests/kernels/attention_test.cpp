// Tests kernels/cpu/attention.hpp against a double-precision reference.
#include <kernels/cpu/attention.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

namespace cpu = tf::kernels::cpu;

namespace {

struct cache {
  std::int64_t num_pages = 6, page_tokens = 4, n_heads = 4, n_kv_heads = 2, head_dim = 8;
  std::vector<float> k, v;
  std::vector<std::uint16_t> k16, v16;
  std::vector<std::int32_t> table = {3, 0, 5, 1, 4};  // scattered pages
  cache() {
    std::mt19937 gen(11);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const auto n = static_cast<std::size_t>(num_pages * page_tokens * n_kv_heads * head_dim);
    k.resize(n);
    v.resize(n);
    for (auto& x : k) x = cpu::fp16_to_fp32(cpu::fp32_to_fp16(d(gen)));  // exact in f16 too
    for (auto& x : v) x = cpu::fp16_to_fp32(cpu::fp32_to_fp16(d(gen)));
    for (float x : k) k16.push_back(cpu::fp32_to_fp16(x));
    for (float x : v) v16.push_back(cpu::fp32_to_fp16(x));
  }
  cpu::kv_cache_view view(cpu::kv_dtype t) const {
    return {t == cpu::kv_dtype::f32 ? static_cast<const void*>(k.data()) : k16.data(),
            t == cpu::kv_dtype::f32 ? static_cast<const void*>(v.data()) : v16.data(),
            t,
            num_pages,
            page_tokens,
            table.data(),
            static_cast<std::int64_t>(table.size()),
            n_heads,
            n_kv_heads,
            head_dim};
  }
  const float* at(const std::vector<float>& c, std::int64_t t, std::int64_t kvh) const {
    const std::int64_t page = table[static_cast<std::size_t>(t / page_tokens)];
    return &c[static_cast<std::size_t>(((page * page_tokens + t % page_tokens) * n_kv_heads + kvh) *
                                       head_dim)];
  }
  // Double reference for one head.
  std::vector<double> ref(const float* q, std::int64_t h, std::int64_t n_tokens, std::int64_t q_pos,
                          std::int64_t window, double scale, double softcap) const {
    const std::int64_t kvh = h / (n_heads / n_kv_heads);
    std::vector<double> s;
    std::vector<std::int64_t> keys;
    for (std::int64_t t = 0; t < n_tokens; ++t) {
      if (window > 0 && q_pos - t >= window) continue;
      double d = 0;
      for (std::int64_t i = 0; i < head_dim; ++i) d += double(q[i]) * at(k, t, kvh)[i];
      d *= scale;
      if (softcap > 0) d = softcap * std::tanh(d / softcap);
      s.push_back(d);
      keys.push_back(t);
    }
    std::vector<double> out(static_cast<std::size_t>(head_dim), 0.0);
    if (s.empty()) return out;
    double m = s[0], z = 0;
    for (double x : s) m = std::max(m, x);
    for (double& x : s) z += (x = std::exp(x - m));
    for (std::size_t j = 0; j < s.size(); ++j)
      for (std::int64_t i = 0; i < head_dim; ++i) out[i] += s[j] / z * at(v, keys[j], kvh)[i];
    return out;
  }
};

}  // namespace

TEST_CASE("attention matches a double reference (GQA, paging, window, softcap, f16)",
          "[attention]") {
  cache c;
  std::mt19937 gen(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(c.n_heads * c.head_dim));
  for (auto& x : q) x = d(gen);
  cpu::thread_pool pool(2);
  for (auto dtype : {cpu::kv_dtype::f32, cpu::kv_dtype::f16})
    for (std::int64_t window : {0, 5})
      for (float softcap : {0.0f, 2.0f})
        for (std::int64_t n_tokens : {1, 7, 19}) {
          std::vector<float> out(q.size(), 99.0f);
          const std::int64_t q_pos = n_tokens - 1;
          cpu::attention(
              {c.view(dtype), q.data(), out.data(), n_tokens, q_pos, window, 0.35f, softcap}, pool);
          for (std::int64_t h = 0; h < c.n_heads; ++h) {
            const auto want = c.ref(&q[h * c.head_dim], h, n_tokens, q_pos, window, 0.35f, softcap);
            for (std::int64_t i = 0; i < c.head_dim; ++i)
              REQUIRE(out[h * c.head_dim + i] == Approx(want[i]).margin(2e-6).epsilon(1e-5));
          }
        }
}

TEST_CASE("prefill rows equal single-row calls bit for bit, at any thread count", "[attention]") {
  cache c;
  const std::int64_t rows = 6, n_tokens = 17;
  const std::int64_t pos[rows] = {11, 12, 13, 14, 15, 16};
  std::mt19937 gen(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(rows * c.n_heads * c.head_dim));
  for (auto& x : q) x = d(gen);
  const std::int64_t row_len = c.n_heads * c.head_dim;
  for (std::int64_t window : {0, 4}) {
    std::vector<float> batch1, batch3;
    for (int threads : {1, 3}) {
      cpu::thread_pool pool(threads);
      std::vector<float> out(q.size());
      cpu::attention_prefill(
          {c.view(cpu::kv_dtype::f32), q.data(), out.data(), pos, rows, n_tokens, window, 0.3f, 0},
          pool);
      (threads == 1 ? batch1 : batch3) = out;
    }
    CHECK(batch1 == batch3);
    cpu::thread_pool pool(2);
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<float> one(static_cast<std::size_t>(row_len));
      cpu::attention({c.view(cpu::kv_dtype::f32), &q[r * row_len], one.data(), pos[r] + 1, pos[r],
                      window, 0.3f, 0},
                     pool);
      CHECK(std::vector<float>(batch1.begin() + r * row_len, batch1.begin() + (r + 1) * row_len) ==
            one);
    }
  }
}

TEST_CASE("attention rejects views that would read outside the cache", "[attention]") {
  cache c;
  cpu::thread_pool pool(1);
  std::vector<float> q(32), out(32);
  auto bad = c.table;
  bad[1] = 6;  // past num_pages
  auto v = c.view(cpu::kv_dtype::f32);
  v.page_table = bad.data();
  CHECK_THROWS_AS(cpu::attention({v, q.data(), out.data(), 6, 5}, pool), tf::error);
  CHECK_NOTHROW(cpu::attention({v, q.data(), out.data(), 4, 3}, pool));  // page 1 unused
  CHECK_THROWS_AS(cpu::attention({c.view(cpu::kv_dtype::f32), q.data(), out.data(), 21, 20}, pool),
                  tf::error);
  auto g = c.view(cpu::kv_dtype::f32);
  g.n_kv_heads = 3;
  CHECK_THROWS_AS(cpu::attention({g, q.data(), out.data(), 4, 3}, pool), tf::error);
}
