// The built `serve` binary, live on a loopback port: the real openai client and curl, the serve
// check (--parallel 4, 8 concurrent, /v1/load), and the census line at SIGTERM; the test server
// over the toy models (tests/serve/toy_serve.cpp): a bounded load, the hybrid toy's slots census
// and the budget's reserve.
#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <tests/serve/live_server.hpp>
#include <tf/model/model_file.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tf::test::live;

namespace {

/// The tiny fixture GGUFs (fixtures/<family>/tiny*/tiny*.gguf or fixtures/*/tiny*.gguf) that carry
/// a tokenizer, so serve can take text; the rest are named in `skipped`.
std::vector<fs::path> tiny_fixtures_with_tokenizer(std::vector<std::string>& skipped) {
  std::vector<fs::path> found;
  fs::path const root = TF_FIXTURES_DIR;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    if (it.depth() > 2) {
      it.disable_recursion_pending();
      continue;
    }
    auto const& p = it->path();
    if (!it->is_regular_file() || p.extension() != ".gguf" ||
        p.filename().string().rfind("tiny", 0) != 0)
      continue;
    try {
      auto f = tf::model::model_file::open(p);
      if (f.gguf() != nullptr && f.gguf()->get_string("tokenizer.ggml.model"))
        found.push_back(p);
      else
        skipped.push_back(p.string() + ": no tokenizer.ggml.model");
    } catch (std::exception const& e) {
      skipped.push_back(p.string() + ": " + e.what());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

TEST_CASE("every tiny fixture GGUF with a tokenizer: 8 concurrent greedy == solo (token_sha)") {
  if (!fs::exists(serve_binary())) {
    cannot_run("the serve binary is not built: " + serve_binary().string());
    return;
  }
  if (!have_python_openai()) return;
  std::vector<std::string> skipped;
  auto const models = tiny_fixtures_with_tokenizer(skipped);
  // Model-file fixtures made without a vocabulary (fixtures/model, gemma/tiny) cannot take text.
  for (auto const& s : skipped) UNSCOPED_INFO("not a text fixture: " << s);
  REQUIRE(!models.empty());
  int served = 0;
  for (auto const& m : models) {
    INFO(m.string());
    live_server s({m.string(), "--parallel", "8", "--context", "512", "--threads", "2",
                   "--prompt-cache-gib", "0.01"});
    if (!s.wait_ready(std::chrono::seconds(120)))
      FAIL("serve did not start on " << m.string() << ":\n" << s.log());
    check_openai_client(s.base(), "concurrent 8 8");
    CHECK(s.stop() == 0);
    check_census(s.log());
    ++served;
  }
  CHECK(served == static_cast<int>(models.size()));
}

TEST_CASE("the openai client and curl against the live server on the real model") {
  if (!real_model_ready()) return;
  if (!have_python_openai()) return;
  live_server s({"--parallel", "2", "--context", "2048", "--threads", "2"});
  REQUIRE(s.wait_ready(std::chrono::seconds(180)));
  check_openai_client(s.base(), "client");

  if (std::system("command -v curl >/dev/null 2>&1") == 0) {
    int rc = 0;
    auto const models = run_capture("curl -sS " + s.base() + "/v1/models", rc);
    REQUIRE(rc == 0);
    auto const mj = nlohmann::json::parse(models);
    CHECK(mj.at("data").size() >= 1);
    auto const chat = run_capture(
        "curl -sS " + s.base() +
            "/v1/chat/completions -H 'Content-Type: application/json' -d "
            "'{\"messages\":[{\"role\":\"user\",\"content\":\"Say hello.\"}],\"max_tokens\":8,"
            "\"temperature\":0}'",
        rc);
    REQUIRE(rc == 0);
    auto const cj = nlohmann::json::parse(chat);
    CHECK_FALSE(cj.at("choices")[0].at("message").at("content").get<std::string>().empty());
    CHECK(cj.at("usage").at("completion_tokens").get<int>() > 0);
  } else {
    WARN("curl is absent: the curl part is skipped");
  }
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE("the serve check: --parallel 4, 8 concurrent greedy requests on the real model") {
  if (!real_model_ready()) return;
  if (!have_python_openai()) return;
  live_server s({"--parallel", "4", "--context", "8192", "--threads", "2"});
  REQUIRE(s.wait_ready(std::chrono::seconds(180)));
  auto const log = s.log();
  INFO(log);
  CHECK(log.find("4 streams at once") != std::string::npos);
  CHECK(log.find("prompt_cache_budget_bytes") != std::string::npos);
  check_openai_client(s.base(), "concurrent 8 4");
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE("the prompt store on the real model: kept after finish, resumed == fresh") {
  if (!real_model_ready()) return;
  live_server s(
      {"--parallel", "2", "--context", "2048", "--threads", "2", "--prompt-cache-gib", "0.25"});
  REQUIRE(s.wait_ready(std::chrono::seconds(180)));
  std::smatch m;
  auto const log = s.log();
  INFO(log);
  REQUIRE(std::regex_search(log, m, std::regex(R"(prompt_cache_budget_bytes (\d+))")));
  auto const budget = std::stoull(m[1]);
  CHECK(budget > 0);
  std::string prompt;
  for (int i = 0; i < 40; ++i)
    prompt += "The quick brown fox jumps over the lazy dog number " + std::to_string(i) + ". ";
  auto const run0 = prompt_tokens_run(s.port());
  auto const fresh = complete(s.port(), prompt, 8);
  auto const run1 = prompt_tokens_run(s.port());
  auto const prompt_len = fresh.at("usage").at("prompt_tokens").get<std::uint64_t>();
  REQUIRE(prompt_len > 256);  // at least one whole page to keep
  CHECK(run1 - run0 == prompt_len);
  // The finished request's whole prompt pages stay in the store, within the budget. The reply
  // reaches the client before the lane retires the stream at its next round, so wait for that.
  auto after = load_of(s.port());
  for (int i = 0; i < 100 && after.at("running").get<int>() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = load_of(s.port());
  }
  INFO(after.dump());
  auto const store = after.at("pages").at("store").get<std::uint64_t>();
  CHECK(store >= 1);
  CHECK(after.at("pages").at("held").get<std::uint64_t>() == 0);
  // The same prompt again resumes from the store: fewer prompt tokens run, the same reply.
  auto const resumed = complete(s.port(), prompt, 8);
  auto const run2 = prompt_tokens_run(s.port());
  CHECK(run2 - run1 < prompt_len);
  CHECK(run2 - run1 >= 1);
  CHECK(resumed.at("tf").at("token_sha") == fresh.at("tf").at("token_sha"));
  CHECK(resumed.at("choices")[0].at("text") == fresh.at("choices")[0].at("text"));
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE(
    "the serve check at --parallel 8: 8 concurrent greedy requests == solo on the real model") {
  if (!real_model_ready()) return;
  if (!have_python_openai()) return;
  live_server s({"--parallel", "8", "--context", "2048", "--threads", "2"});
  REQUIRE(s.wait_ready(std::chrono::seconds(180)));
  check_openai_client(s.base(), "concurrent 8 8");
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE("a --parallel N that does not fit is refused with the budget's message") {
  if (!real_model_ready()) return;
  live_server s({"--parallel", "4000", "--context", "131072", "--threads", "1"});
  CHECK_FALSE(s.wait_ready(std::chrono::seconds(120)));
  auto const log = s.log();
  INFO(log);
  CHECK(log.find("--parallel 4000 does not fit") != std::string::npos);
  CHECK(s.stop() == 1);
}

TEST_CASE("bounded load on the toy model: 300 requests, 16 clients, oversize and cancels") {
  REQUIRE(fs::exists(toy_binary()));
  std::size_t const context = 512;
  live_server s({"--parallel", "4", "--context", std::to_string(context), "--max-queue", "8",
                 "--threads", "1"},
                toy_binary());
  REQUIRE(s.wait_ready(std::chrono::seconds(60)));
  int const port = s.port();
  std::atomic<int> next{0}, ok{0}, clear_errors{0}, cancelled{0}, unclear{0}, retried{0};
  std::vector<std::string> problems;
  std::mutex problems_mu;
  auto worker = [&](unsigned seed) {
    std::mt19937 rng(seed);
    for (int i = next++; i < 300; i = next++) {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60);
      int const kind = static_cast<int>(rng() % 10);
      std::size_t const len = kind == 0 ? context + 50 + rng() % 400 : 1 + rng() % 200;
      nlohmann::json body = {{"prompt", std::string(len, static_cast<char>('a' + rng() % 26))},
                             {"max_tokens", 1 + static_cast<int>(rng() % 48)},
                             {"temperature", 0}};
      if (kind == 1) {
        // A client that reads the first streamed bytes and hangs up: its request is cancelled.
        body["stream"] = true;
        body["max_tokens"] = 400;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = body.dump();
        req.set_header("Content-Type", "application/json");
        req.content_receiver = [](char const*, std::size_t, std::uint64_t, std::uint64_t) {
          return false;
        };
        httplib::Response res;
        httplib::Error err = httplib::Error::Success;
        c.send(req, res, err);
        cancelled++;
        continue;
      }
      auto r = c.Post("/v1/completions", body.dump(), "application/json");
      if (!r && r.error() == httplib::Error::Read) {
        // httplib's client (0.11) now and then loses a reply on a fresh loopback connection under
        // this load; Python's http.client against the same server never did in 1500 requests.
        // One retry on a new connection, counted and bounded below.
        retried++;
        httplib::Client again("127.0.0.1", port);
        again.set_read_timeout(60);
        r = again.Post("/v1/completions", body.dump(), "application/json");
      }
      if (!r) {
        std::lock_guard lk(problems_mu);
        problems.push_back("request " + std::to_string(i) +
                           ": no reply: " + httplib::to_string(r.error()));
        unclear++;
        continue;
      }
      auto const j = nlohmann::json::parse(r->body, nullptr, false);
      if (r->status == 200 && j.is_object() && j.contains("choices")) {
        ok++;
      } else if ((r->status == 400 || r->status == 503) && j.is_object() && j.contains("error") &&
                 j["error"].contains("code")) {
        clear_errors++;
      } else {
        std::lock_guard lk(problems_mu);
        problems.push_back("request " + std::to_string(i) + ": status " +
                           std::to_string(r->status) + " " + r->body.substr(0, 200));
        unclear++;
      }
    }
  };
  std::vector<std::thread> clients;
  for (unsigned t = 0; t < 16; ++t) clients.emplace_back(worker, 1234 + t);
  for (auto& t : clients) t.join();
  for (auto const& p : problems) UNSCOPED_INFO(p);
  CHECK(unclear == 0);
  CHECK(retried <= 6);
  CHECK(ok + clear_errors + cancelled == 300);
  CHECK(ok > 0);
  CHECK(clear_errors > 0);  // the oversize prompts
  // The server still serves after the load.
  httplib::Client c("127.0.0.1", port);
  auto r = c.Post("/v1/completions", R"({"prompt":"after","max_tokens":4})", "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(s.stop() == 0);
  check_census(s.log());
}

TEST_CASE(
    "--reserve-gib sets the reserve the budget keeps back; too large or not a number is refused") {
  REQUIRE(fs::exists(toy_binary()));
  {
    live_server s({"--parallel", "2", "--context", "256", "--threads", "1", "--reserve-gib", "0.5"},
                  toy_binary());
    REQUIRE(s.wait_ready(std::chrono::seconds(60)));
    CHECK(s.stop() == 0);
    INFO(s.log());
    CHECK(s.log().find("a 0.5 GiB reserve") != std::string::npos);
  }
  {
    live_server s(
        {"--parallel", "2", "--context", "256", "--threads", "1", "--reserve-gib", "1000000"},
        toy_binary());
    CHECK_FALSE(s.wait_ready(std::chrono::seconds(60)));
    CHECK(s.stop() == 1);
    INFO(s.log());
    CHECK(s.log().find("1000000.0 GiB reserve") != std::string::npos);
  }
  {
    live_server s({"--reserve-gib", "lots"}, toy_binary());
    CHECK_FALSE(s.wait_ready(std::chrono::seconds(60)));
    CHECK(s.stop() == 1);
    INFO(s.log());
    CHECK(s.log().find("--reserve-gib: 'lots' is not a GiB count") != std::string::npos);
  }
}

TEST_CASE("the hybrid toy served live: resumed == fresh, state slots in /v1/load, slots census") {
  REQUIRE(fs::exists(toy_binary()));
  live_server s({"--hybrid", "--parallel", "2", "--context", "1024", "--prompt-cache-gib", "0.01"},
                toy_binary());
  REQUIRE(s.wait_ready(std::chrono::seconds(60)));
  auto const log = s.log();
  INFO(log);
  CHECK(log.find("recurrent state 64 bytes per stream") != std::string::npos);
  std::string const prompt(300, 'z');  // 301 tokens: the kept state is the one at 300
  auto const fresh = complete(s.port(), prompt, 16);
  auto const run1 = prompt_tokens_run(s.port());
  auto const resumed = complete(s.port(), prompt + "more", 16);
  CHECK(prompt_tokens_run(s.port()) - run1 == 301 + 4 - 300);
  auto const load = load_of(s.port());
  INFO(load.dump());
  CHECK(load.at("lanes").at("total") == 2);
  CHECK(load.at("state_slots").at("total") == 4);  // 6 slots less a snapshot per lane
  CHECK(load.at("state_slots").at("held").get<int>() >= 1);
  CHECK(fresh.at("choices")[0].at("text") != "");
  live_server solo(
      {"--hybrid", "--parallel", "1", "--context", "1024", "--prompt-cache-gib", "0.01"},
      toy_binary());
  REQUIRE(solo.wait_ready(std::chrono::seconds(60)));
  CHECK(complete(solo.port(), prompt + "more", 16).at("tf").at("token_sha") ==
        resumed.at("tf").at("token_sha"));
  CHECK(solo.stop() == 0);
  CHECK(s.stop() == 0);
  auto const stopped = s.log();
  std::smatch m;
  std::regex const line(
      R"(KV census at stop: promised 0, free (\d+) \+ store (\d+) == total (\d+); slots free (\d+) \+ held (\d+) == 4\n)");
  INFO(stopped);
  REQUIRE(std::regex_search(stopped, m, line));
  CHECK(std::stoull(m[1]) + std::stoull(m[2]) == std::stoull(m[3]));
  CHECK(std::stoull(m[4]) + std::stoull(m[5]) == 4);
  // Every kept state: each prompt's (before its last token) and each reply's end.
  CHECK(m[5] == "4");
}
