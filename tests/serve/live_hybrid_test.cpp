// The hybrid families (Qwen3.5, Nemotron-H) served live by the real `serve` binary from their tiny
// fixtures: the start-up line counts the recurrent state, /v1/load reports the slots, a prompt
// resumed from the store's kept prefix (pages and the state at its end) gives the tokens a fresh
// server gives, 8 concurrent greedy replies equal solo ones, and the census at stop balances both
// the pages and the slots.
#include <tests/serve/live_server.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <string>

namespace fs = std::filesystem;
using namespace tf::test::live;

namespace {

std::vector<fs::path> hybrid_fixtures() {
  fs::path const root = TF_FIXTURES_DIR;
  return {root / "qwen/tiny35/tiny-f32.gguf", root / "qwen/tiny35_moe/tiny-q8_0.gguf",
          root / "nemotron/tiny_h/tiny-f32.gguf", root / "nemotron/tiny_h_moe/tiny-q8_0.gguf"};
}

// A prompt of several hundred tokens in the fixtures' byte-level vocabulary.
std::string long_prompt() {
  std::string p;
  for (int i = 0; i < 60; ++i) p += "state " + std::to_string(i * 7919 % 1000) + " kept; ";
  return p;
}

}  // namespace

TEST_CASE("hybrid families served live: slots, resumed == fresh, concurrent == solo, census") {
  REQUIRE(fs::exists(serve_binary()));
  REQUIRE(have_python_openai());
  for (auto const& model : hybrid_fixtures()) {
    INFO(model.string());
    REQUIRE(fs::exists(model));
    std::vector<std::string> const args{model.string(), "--parallel", "2", "--context",
                                        "1024",         "--threads",  "2", "--prompt-cache-gib",
                                        "0.01"};
    live_server s(args);
    REQUIRE(s.wait_ready(std::chrono::seconds(120)));
    auto const start = s.log();
    INFO(start);
    CHECK(std::regex_search(start, std::regex(R"(recurrent state \d+ bytes per stream)")));

    auto const prompt = long_prompt();
    auto const fresh = complete(s.port(), prompt, 12);
    auto const n_prompt = fresh.at("usage").at("prompt_tokens").get<std::uint64_t>();
    auto const run1 = prompt_tokens_run(s.port());
    auto const resumed = complete(s.port(), prompt + " and more", 12);
    auto const n_resumed = resumed.at("usage").at("prompt_tokens").get<std::uint64_t>();
    // The kept prefix was not run again: the state at its end came from the store.
    CHECK(prompt_tokens_run(s.port()) - run1 < n_resumed);
    CHECK(n_resumed > n_prompt);

    auto const load = load_of(s.port());
    INFO(load.dump());
    CHECK(load.at("lanes").at("total") == 2);
    auto const slots = load.at("state_slots");
    CHECK(slots.at("total").get<int>() >= 2);
    CHECK(slots.at("free").get<int>() + slots.at("held").get<int>() ==
          slots.at("total").get<int>());
    CHECK(slots.at("held").get<int>() >= 1);  // the kept prompt's state

    live_server solo({model.string(), "--parallel", "1", "--context", "1024", "--threads", "2",
                      "--prompt-cache-gib", "0.01"});
    REQUIRE(solo.wait_ready(std::chrono::seconds(120)));
    CHECK(complete(solo.port(), prompt + " and more", 12).at("tf").at("token_sha") ==
          resumed.at("tf").at("token_sha"));
    CHECK(solo.stop() == 0);

    // 8 at once over 2 lanes (queued, and taking kept states over): each equals its solo reply.
    // The queue is not asserted: these models answer faster than the client's poll.
    check_openai_client(s.base(), "concurrent 8 8");
    CHECK(s.stop() == 0);
    auto const stopped = s.log();
    check_census(stopped);
    CHECK(stopped.find("; slots free ") != std::string::npos);
  }
}
