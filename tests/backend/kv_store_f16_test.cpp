// Tests include/tf/backend/cpu/kv_store.hpp's f16 attention: a prompt attended in one batch (in
// tiles of tokens, at 1 and 2 threads) gives each token the bits it gets attended alone.
#include <kernels/cpu/quant_blocks.hpp>
#include <kernels/cpu/thread_pool.hpp>
#include <tf/backend/cpu/kv_store.hpp>
#include <tf/backend/host_step.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using tf::backend::cpu_parts::kv_store;
using step = tf::backend::host_step;

std::vector<float> random_f32(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

}  // namespace

TEST_CASE("f16 attention: batched prompt tokens have their one-token bits, windows and pages") {
  std::mt19937 gen(21);
  std::int32_t const n = 300, page_tokens = 16, pages = (n + page_tokens - 1) / page_tokens;
  std::vector<std::int32_t> table(static_cast<std::size_t>(pages)), toks(n, 0);
  for (std::int32_t i = 0; i < pages; ++i) table[static_cast<std::size_t>(i)] = pages - 1 - i;
  for (int head_dim : {256, 64})
    for (int heads : {4, 2, 1})
      for (int window : {0, 77}) {
        tf::kv_shape const shape{pages, page_tokens, tf::kv_dtype::f16, 0};
        kv_store kv(shape, {1, 1, head_dim});
        tf::batch_row const row{toks, 0, table, true};
        step all;
        all.gather({&row, 1}, shape, 1);
        auto const hd = static_cast<std::size_t>(head_dim);
        auto const k = random_f32(n * hd, gen), v = random_f32(n * hd, gen);
        for (std::int64_t t = 0; t < n; ++t)
          kv.store(all, 0, t, k.data() + t * head_dim, v.data() + t * head_dim);
        auto const q = random_f32(n * hd * static_cast<std::size_t>(heads), gen);
        tf::backend::attention_params const a{heads, 1, head_dim, 0.0f, window, 0.0f};
        std::size_t const out_dim = hd * static_cast<std::size_t>(heads);
        std::vector<float> one(n * out_dim);
        tf::kernels::cpu::thread_pool pool1(1), pool2(2);
        for (std::int32_t t = 0; t < n; ++t) {
          tf::batch_row const r{std::span(toks).subspan(0, 1), t, table};
          step s;
          s.gather({&r, 1}, shape, 1);
          kv.attend(pool1, s, 0, q.data() + t * out_dim, one.data() + t * out_dim, a);
        }
        for (auto* pool : {&pool1, &pool2}) {
          std::vector<float> batched(n * out_dim);
          kv.attend(*pool, all, 0, q.data(), batched.data(), a);
          INFO("head_dim " << head_dim << " heads " << heads << " window " << window << " threads "
                           << pool->size());
          CHECK(std::memcmp(batched.data(), one.data(), one.size() * sizeof(float)) == 0);
        }
      }
}
