#include <tf/serve/lane_host.hpp>
#include <tf/serve/sha256.hpp>

#include <catch2/catch.hpp>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "lane_requests.hpp"
#include "toy_model.hpp"

using namespace tf::serve;
using namespace std::chrono_literals;

namespace {

std::vector<reply> run_concurrent(std::size_t parallel, std::size_t pages) {
  toy_model model(pages, 16, 200us);
  lane_host<toy_model, toy_family> host(model, {parallel, 512, 64, 64});
  std::vector<std::shared_ptr<request_stream>> streams;
  for (auto const& p : prompts()) {
    auto r = host.submit(make_request(p, 48));
    REQUIRE(r.status != submit_status::rejected);
    streams.push_back(r.stream);
  }
  std::vector<reply> out;
  for (auto& s : streams) out.push_back(drain(s));
  auto load = host.load();
  CHECK(load.max_running_seen <= parallel);
  auto c = host.shutdown(0ms);
  CHECK(c.balanced());
  CHECK(c.line() ==
        fmt::format("promised 0, free {} + store {} == total {}", c.free, c.store, pages));
  CHECK(c.free + c.store == static_cast<std::int64_t>(pages));
  return out;
}

}  // namespace

TEST_CASE("concurrent replies equal solo replies at --parallel 4 and 8") {
  std::vector<reply> solo;
  for (auto const& p : prompts()) {
    toy_model model(64, 16);
    lane_host<toy_model, toy_family> host(model, {1, 512, 8, 64});
    solo.push_back(drain(host.submit(make_request(p, 48)).stream));
    CHECK(host.shutdown(0ms).balanced());
  }
  for (std::size_t parallel : {4u, 8u}) {
    auto got = run_concurrent(parallel, 64);
    REQUIRE(got.size() == solo.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("parallel " << parallel << " request " << i);
      CHECK(token_sha(got[i].tokens) == token_sha(solo[i].tokens));
      CHECK(got[i].reason == solo[i].reason);
      CHECK(!got[i].tokens.empty());
    }
  }
  // A pool too small for all of them at once: some wait for pages, replies do not change.
  auto tight = run_concurrent(8, 24);
  for (std::size_t i = 0; i < tight.size(); ++i) CHECK(tight[i].tokens == solo[i].tokens);
}

TEST_CASE("a resumed prompt (prefix from the prompt store) equals a fresh one") {
  std::string const base(100, 'r');
  std::vector<std::int32_t> fresh_a, fresh_b;
  {
    toy_model model(64, 16);
    lane_host<toy_model, toy_family> host(model, {1, 512, 8, 64});
    fresh_a = drain(host.submit(make_request(base, 30)).stream).tokens;
    host.shutdown(0ms);
  }
  {
    toy_model model(64, 16);
    lane_host<toy_model, toy_family> host(model, {1, 512, 8, 64});
    fresh_b = drain(host.submit(make_request(base + "tail", 30)).stream).tokens;
    host.shutdown(0ms);
  }
  toy_model model(64, 16);
  lane_host<toy_model, toy_family> host(model, {1, 512, 8, 64});
  auto first = drain(host.submit(make_request(base, 30)).stream).tokens;
  auto read_once = host.stats().prompt_tokens.load();
  auto again = drain(host.submit(make_request(base, 30)).stream).tokens;
  auto longer = drain(host.submit(make_request(base + "tail", 30)).stream).tokens;
  CHECK(first == fresh_a);
  CHECK(again == fresh_a);
  CHECK(longer == fresh_b);
  // The repeats read fewer prompt tokens than they hold: their prefix came from the store.
  CHECK(host.stats().prompt_tokens.load() - read_once < 2 * (base.size() + 1));
  auto c = host.shutdown(0ms);
  CHECK(c.balanced());
  CHECK(c.store > 0);
}

namespace {

// A chat of `turns` turns on one host: turn k's prompt is every earlier prompt and reply, then
// a new line. Returns each turn's reply and the prompt tokens each turn read from the store.
struct chat_run {
  std::vector<std::vector<std::int32_t>> replies;
  std::vector<std::uint64_t> reused;
  std::vector<std::size_t> in_kv;  // tokens the previous turn left in the KV
  std::uint64_t page_copies = 0;
};

chat_run chat(int turns, bool drop_copies = false) {
  toy_model model(64, 16);
  model.drop_page_copies = drop_copies;
  lane_host<toy_model, toy_family> host(model, {1, 512, 8, 64});
  chat_run out;
  std::string text = "system: be brief.";
  std::size_t in_kv = 0;
  for (int k = 0; k < turns; ++k) {
    text += " user " + std::to_string(k) + ":";
    auto const before = host.stats().prompt_tokens_reused.load();
    auto r = drain(host.submit(make_request(text, 12)).stream);
    out.reused.push_back(host.stats().prompt_tokens_reused.load() - before);
    out.in_kv.push_back(in_kv);
    // What the KV holds after the turn: the prompt, and the reply but its last sampled token
    // (never run) unless the reply ended on the end token.
    in_kv = 1 + text.size() + r.tokens.size() - (r.reason == finish_reason::length ? 1 : 0);
    for (auto t : r.tokens) text += static_cast<char>(t);
    out.replies.push_back(r.tokens);
  }
  out.page_copies = model.page_copies();
  auto c = host.shutdown(0ms);
  CHECK(c.balanced());
  return out;
}

// The reply a fresh host gives for turn k's prompt.
std::vector<std::vector<std::int32_t>> fresh_chat(int turns) {
  std::vector<std::vector<std::int32_t>> out;
  std::string text = "system: be brief.";
  for (int k = 0; k < turns; ++k) {
    text += " user " + std::to_string(k) + ":";
    toy_model model(64, 16);
    lane_host<toy_model, toy_family> host(model, {1, 512, 8, 64});
    auto r = drain(host.submit(make_request(text, 12)).stream);
    host.shutdown(0ms);
    for (auto t : r.tokens) text += static_cast<char>(t);
    out.push_back(r.tokens);
  }
  return out;
}

}  // namespace

TEST_CASE("a 5-turn chat: turn k reads only its new tokens, and every reply equals a fresh one") {
  auto const fresh = fresh_chat(5);
  auto const run = chat(5);
  REQUIRE(run.replies.size() == 5);
  for (std::size_t k = 0; k < 5; ++k) {
    INFO("turn " << k);
    CHECK(run.replies[k] == fresh[k]);
    // Everything the previous turn wrote, to the token: prompt and reply.
    CHECK(run.reused[k] == run.in_kv[k]);
  }
  CHECK(run.reused[0] == 0);
  CHECK(run.page_copies > 0);  // turns end inside a page: the next one copies it
}

TEST_CASE("a chat whose shared last pages are not copied gives other replies (the test can fail)") {
  auto const fresh = fresh_chat(5);
  auto const run = chat(5, true);
  CHECK(run.page_copies > 0);
  CHECK(run.replies != fresh);
}

TEST_CASE("refusals: context, whole pool, queue full, bad tokens") {
  toy_model model(8, 16);
  lane_host<toy_model, toy_family> host(model, {2, 256, 1, 64});
  auto big = host.submit(make_request(std::string(300, 'x'), 4));
  CHECK(big.status == submit_status::rejected);
  CHECK(big.reason == reject_reason::context_length_exceeded);
  auto pool = host.submit(make_request(std::string(200, 'x'), -1));  // 256 tokens = 16 pages > 8
  CHECK(pool.status == submit_status::rejected);
  CHECK(pool.reason == reject_reason::larger_than_pool);
  generation_request bad;
  bad.prompt = {1, 999};
  CHECK(host.submit(bad).reason == reject_reason::bad_request);
  generation_request neg = make_request("hi", 4);
  neg.sampling.temperature = -1.0f;
  CHECK(host.submit(neg).reason == reject_reason::bad_request);
  CHECK(host.shutdown(0ms).balanced());
}

TEST_CASE("queue full once the waiting line is at its bound") {
  toy_model model(64, 16, 2ms);
  lane_host<toy_model, toy_family> host(model, {1, 256, 2, 64});
  std::vector<stream_submit> rs;
  for (int i = 0; i < 6; ++i) rs.push_back(host.submit(make_request("hello", 40)));
  int full = 0;
  for (auto& r : rs) full += r.reason == reject_reason::queue_full;
  CHECK(full >= 2);
  for (auto& r : rs)
    if (r.stream) drain(r.stream);
  CHECK(host.shutdown(0ms).balanced());
}

TEST_CASE("a cancelled request frees its pages at the next round") {
  toy_model model(160, 16, 1ms);
  lane_host<toy_model, toy_family> host(model, {2, 1024, 8, 64});
  auto r = host.submit(make_request("go on", -1));
  REQUIRE(r.stream);
  auto first = r.stream->next(2000ms);
  CHECK(!first.done);
  std::this_thread::sleep_for(20ms);
  CHECK(host.load().pages_held > 0);
  r.stream->cancel();
  auto rep = drain(r.stream);
  CHECK(rep.reason == finish_reason::cancelled);
  for (int i = 0; i < 100 && host.load().running > 0; ++i) std::this_thread::sleep_for(5ms);
  CHECK(host.count().balanced());
  CHECK(host.shutdown(0ms).balanced());
}

TEST_CASE("shutdown cancels what is still running and balances") {
  toy_model model(160, 16, 1ms);
  lane_host<toy_model, toy_family> host(model, {2, 1024, 8, 64});
  auto a = host.submit(make_request("one", -1));
  auto b = host.submit(make_request("two", -1));
  auto c = host.submit(make_request("three", -1));
  std::this_thread::sleep_for(20ms);
  auto census = host.shutdown(10ms);
  CHECK(census.balanced());
  CHECK(drain(a.stream).reason == finish_reason::cancelled);
  CHECK(drain(c.stream).reason == finish_reason::cancelled);
  CHECK(host.submit(make_request("late", 2)).reason == reject_reason::stopping);
}

TEST_CASE("sha256 matches the FIPS 180-4 examples") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // 1000 bytes: several blocks and a padding block of its own.
  CHECK(sha256_hex(std::string(1000, 'a')) ==
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
  std::vector<std::int32_t> t{1, 2, 3};
  CHECK(token_sha(t) == sha256_hex(std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0", 12)));
}

namespace {

// The toy model with forward_sample (serve::sampling_model): what an engine offers, so the lane
// host samples through it; here it runs forward and sampler::sample, counting its calls.
class sampling_toy : public toy_model {
 public:
  using toy_model::toy_model;
  std::uint64_t sample_calls = 0;
  void forward_sample(std::span<tf::batch_row const> rows,
                      std::span<tf::sample::sampler* const> samplers,
                      std::span<std::span<std::int32_t const> const> histories,
                      std::span<tf::sample::sample_result> out) {
    ++sample_calls;
    std::vector<float> logits(samplers.size() * vocab_size());
    forward(rows, logits.data());
    for (std::size_t i = 0; i < samplers.size(); ++i)
      out[i] = samplers[i]->sample(
          std::span<float const>(logits).subspan(i * vocab_size(), vocab_size()), histories[i]);
  }
};
static_assert(sampling_model<sampling_toy>);
static_assert(!sampling_model<toy_model>);

template <class Model>
std::vector<reply> sampled_replies(Model& model) {
  lane_host<Model, toy_family> host(model, {4, 512, 64, 64});
  std::vector<std::shared_ptr<request_stream>> streams;
  std::uint64_t seed = 1;
  for (auto const& p : prompts()) {
    auto req = make_request(p, 24);
    req.sampling = {
        .temperature = 0.9f, .top_p = 0.95f, .repetition_penalty = 1.2f, .seed = seed++};
    streams.push_back(host.submit(std::move(req)).stream);
  }
  std::vector<reply> out;
  for (auto& s : streams) out.push_back(drain(s));
  CHECK(host.shutdown(0ms).balanced());
  return out;
}

}  // namespace

TEST_CASE("a model with forward_sample samples through it, with the same replies") {
  toy_model plain(64, 16);
  sampling_toy sampling(64, 16);
  auto const want = sampled_replies(plain);
  auto const got = sampled_replies(sampling);
  CHECK(sampling.sample_calls > 0);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(token_sha(got[i].tokens) == token_sha(want[i].tokens));
    CHECK(got[i].reason == want[i].reason);
  }
}

TEST_CASE("a choice submitted after its leader read the prompt shares the leader's pages") {
  toy_model model(160, 16, 1ms);
  lane_host<toy_model, toy_family> host(model, {2, 1024, 8, 64});
  std::string const text = "a prompt of several pages, read once for two choices";
  auto leader = host.submit(make_request(text, -1));
  REQUIRE(leader.stream);
  // The leader has sampled a token: its prompt is written and it runs on.
  CHECK(!leader.stream->next(2000ms).done);
  auto const read_before = host.stats().prompt_tokens.load();
  auto const reused_before = host.stats().prompt_tokens_reused.load();
  auto req = make_request(text, 3);
  auto const n = req.prompt.size();
  req.prefill_leader = leader.stream;
  auto follower = host.submit(std::move(req));
  REQUIRE(follower.stream);
  auto const shared = drain(follower.stream);
  CHECK(host.stats().prompt_tokens_reused.load() - reused_before == n - 1);
  CHECK(host.stats().prompt_tokens.load() - read_before == 1);
  leader.stream->cancel();
  CHECK(drain(leader.stream).reason == finish_reason::cancelled);
  CHECK(host.shutdown(0ms).balanced());
  // The same prompt on a host of its own replies as the follower did.
  toy_model alone_model(160, 16);
  lane_host<toy_model, toy_family> alone(alone_model, {1, 1024, 8, 64});
  CHECK(drain(alone.submit(make_request(text, 3)).stream).tokens == shared.tokens);
  CHECK(shared.tokens.size() == 3);
  CHECK(alone.shutdown(0ms).balanced());
}
