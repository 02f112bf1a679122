// Tests include/tf/engine/perplexity.hpp on tiny fixtures (dense and hybrid): the windows run as
// a batch of streams give the bits of each window fed alone through one stream and scored in
// order, whatever the batch, the thread count or the logits budget; both of llama-perplexity's
// window layouts; too few tokens refused.
#include <tf/engine/open.hpp>
#include <tf/engine/perplexity.hpp>
#include <tf/engine/stream.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

std::vector<std::int32_t> random_tokens(std::int64_t vocab, std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < n; ++i)
    out.push_back(std::uniform_int_distribution<std::int32_t>(
        0, static_cast<std::int32_t>(vocab - 1))(gen));
  return out;
}

// The measure written out: each window alone from position 0 in one stream, every logits row.
tf::perplexity_result reference(tf::loaded_model& m, std::vector<std::int32_t> const& tokens,
                                tf::perplexity_options const& o) {
  m.set_context(o.context);
  tf::perplexity_result r;
  std::vector<std::int32_t> scratch;
  auto const vocab = static_cast<std::size_t>(m.vocab_size());
  std::int64_t const n = static_cast<std::int64_t>(tokens.size());
  std::int64_t const count =
      o.stride == 0 ? n / o.context : (n - o.context + o.stride - 1) / o.stride;
  for (std::int64_t w = 0; w < count; ++w) {
    auto const start = o.stride == 0 ? w * o.context : w * o.stride;
    std::vector<std::int32_t> win(tokens.begin() + start, tokens.begin() + start + o.context);
    if (o.stride == 0 && o.bos >= 0) win[0] = o.bos;
    std::int64_t const first = o.stride == 0 ? o.context / 2 : o.context - o.stride - 1;
    tf::stream<tf::loaded_model> s(m);
    auto const logits = s.feed_all(win);
    double nll = 0.0;
    for (std::int64_t j = first; j < o.context - 1; ++j) {
      auto const row = logits.subspan(static_cast<std::size_t>(j) * vocab, vocab);
      nll += -static_cast<double>(
          tf::sample::score_token(row, win[static_cast<std::size_t>(j + 1)], 0, scratch).logprob);
      ++r.count;
    }
    r.nll += nll;
    ++r.windows;
  }
  r.ppl = std::exp(r.nll / static_cast<double>(r.count));
  return r;
}

void check_model(std::string const& path) {
  INFO(path);
  tf::open_options oo;
  oo.threads = 1;
  oo.page_tokens = 16;
  auto m = tf::open(path, oo);
  auto const tokens = random_tokens(m->vocab_size(), 300, 3);
  for (std::int32_t stride : {0, 24}) {
    INFO("stride " << stride);
    tf::perplexity_options o;
    o.context = 64;
    o.stride = stride;
    o.bos = stride == 0 ? 2 : -1;
    auto const want = reference(*m, tokens, o);
    REQUIRE(want.count > 0);
    for (std::int32_t streams : {1, 3}) {
      for (std::size_t budget : {std::size_t{1}, std::size_t{64} << 20}) {
        INFO("streams " << streams << ", logits budget " << budget);
        o.streams = streams;
        o.logits_bytes = budget;
        std::vector<double> running;
        auto const got =
            tf::perplexity(*m, tokens, o, [&](std::int32_t, double p) { running.push_back(p); });
        CHECK(got.nll == want.nll);
        CHECK(got.count == want.count);
        CHECK(got.windows == want.windows);
        CHECK(got.ppl == want.ppl);
        CHECK(got.ppl_error > 0.0);
        REQUIRE(running.size() == static_cast<std::size_t>(want.windows));
        CHECK(running.back() == got.ppl);
      }
    }
    // Side by side: 300 / 64 = 4 windows of 31 scored tokens; strided: ceil(236 / 24) = 10 of 24.
    CHECK(want.windows == (stride == 0 ? 4 : 10));
    CHECK(want.count == (stride == 0 ? 4 * 31 : 10 * 24));
  }
  tf::perplexity_options o;
  o.context = 200;
  CHECK_THROWS_WITH(tf::perplexity(*m, tokens, o), Catch::Contains("at least 400 tokens"));
  o.context = 64;
  o.stride = 64;
  CHECK_THROWS_WITH(tf::perplexity(*m, tokens, o), Catch::Contains("stride 64"));
}

}  // namespace

TEST_CASE("perplexity's batched windows equal each window alone, dense and hybrid") {
  check_model(TF_FIXTURES_DIR "/gemma/tiny/tiny-f32.gguf");
  check_model(TF_FIXTURES_DIR "/qwen/tiny35/tiny-f32.gguf");
}

TEST_CASE("perplexity has the same bits at 1 and 2 threads") {
  std::vector<double> nll;
  for (int threads : {1, 2}) {
    tf::open_options oo;
    oo.threads = threads;
    auto m = tf::open(TF_FIXTURES_DIR "/gemma/tiny/tiny-q8_0.gguf", oo);
    tf::perplexity_options o;
    o.context = 96;
    nll.push_back(tf::perplexity(*m, random_tokens(m->vocab_size(), 400, 9), o).nll);
  }
  CHECK(nll[0] == nll[1]);
}
