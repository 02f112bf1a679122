// The load and fault test (issue 25, items 3 and 4), against the built `serve` binary over HTTP
// only. Load: TF_LOAD_REQUESTS requests (default 1,000) per run, twice, from TF_LOAD_CLIENTS
// clients (default 32) on a tiny fixture (TF_LOAD_MODEL: "default" for the default model, or a
// GGUF path), mixing random prompt lengths (past the context and past the whole pool too), random
// max_tokens, streamed and whole replies, hang-ups mid-stream, half-open clients, slow readers,
// malformed bodies and malformed HTTP. It checks the server never dies, every well-formed request
// ends with a whole reply or an error object with a reason before a deadline, greedy replies equal
// their solo runs, /v1/load never shows more running than --parallel or more pages promised than
// exist, the census balances at SIGTERM and resident memory grows less than 8 MiB from the
// first run to the second. Connections: 500 idle and trickling connections do not stop a new
// client being served within 2 s, and a client past --max-connections gets a 503 with a reason.
#include <tests/serve/live_server.hpp>
#include <tf/serve/detail/request_frame.hpp>

#include <fmt/format.h>
#include <httplib.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tf::test::live;
using namespace std::chrono_literals;
using json = nlohmann::json;
using steady = std::chrono::steady_clock;

namespace {

struct settings {
  int requests = 1000;  // per run; two runs
  int clients = 32;
  fs::path model;
  bool real = false;                   // the default model
  std::chrono::seconds deadline{120};  // no request may take longer
};

settings load_settings() {
  settings s;
  if (char const* v = std::getenv("TF_LOAD_REQUESTS")) s.requests = std::max(1, std::atoi(v));
  if (char const* v = std::getenv("TF_LOAD_CLIENTS")) s.clients = std::max(1, std::atoi(v));
  std::string const m = std::getenv("TF_LOAD_MODEL") ? std::getenv("TF_LOAD_MODEL") : "";
  s.real = m == "default";
  s.model = s.real      ? fs::path(default_model)
            : m.empty() ? fs::path(TF_FIXTURES_DIR) / "qwen/tiny/tiny-q8_0.gguf"
                        : fs::path(m);
  if (s.real) s.deadline = 600s;
  return s;
}

// Many sockets at once: the soft descriptor limit up to the hard one.
void raise_fd_limit() {
  rlimit r{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &r) == 0);
  r.rlim_cur = r.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &r);
}

int connect_to(int port) {
  int const fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    auto const n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Appends what arrives, `chunk` bytes at a time with `pause` between reads, until `done(buf)`,
// the end of the stream or `deadline`; returns done(buf).
bool read_until(int fd, std::string& buf, steady::time_point deadline,
                std::function<bool(std::string const&)> const& done, std::size_t chunk = 65536,
                std::chrono::milliseconds pause = 0ms) {
  std::vector<char> tmp(chunk);
  while (!done(buf)) {
    auto const left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
    auto const n = ::recv(fd, tmp.data(), chunk, 0);
    if (n <= 0) return done(buf);
    buf.append(tmp.data(), static_cast<std::size_t>(n));
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  return true;
}

// What has arrived on `fd` without waiting; `eof` when the server closed it.
std::string read_now(int fd, bool& eof) {
  std::string out;
  char tmp[65536];
  eof = false;
  for (;;) {
    auto const n = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n > 0) {
      out.append(tmp, static_cast<std::size_t>(n));
      continue;
    }
    eof = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    return out;
  }
}

std::string post_text(std::string const& path, std::string const& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// An HTTP/1.1 response read off a raw socket: status, and the body once it is whole.
struct raw_reply {
  int status = 0;
  bool whole = false;
  std::string body;
};

raw_reply parse_reply(std::string const& raw) {
  raw_reply r;
  auto const head = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  std::string const headers = raw.substr(0, head);
  auto const body = raw.substr(head + 4);
  std::smatch m;
  if (std::regex_search(headers, m, std::regex("Content-Length: (\\d+)", std::regex::icase))) {
    auto const len = std::stoull(m[1]);
    r.whole = body.size() >= len;
    r.body = body.substr(0, len);
    return r;
  }
  // Chunked.
  std::size_t pos = 0;
  for (;;) {
    auto const eol = body.find("\r\n", pos);
    if (eol == std::string::npos) return r;
    auto const size = std::stoull(body.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) {
      r.whole = true;
      return r;
    }
    if (body.size() < eol + 2 + size) return r;
    r.body += body.substr(eol + 2, size);
    pos = eol + 2 + size + 2;
  }
}

// An SSE reply: whether [DONE] came, the last finish_reason, the tf block's token_sha, and an
// error event's message.
struct sse_reply {
  bool done = false;
  std::string finish, sha, error;
};

sse_reply parse_sse(std::string const& body) {
  sse_reply r;
  std::size_t pos = 0;
  while (pos < body.size()) {
    auto end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    auto const ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;
    auto const data = ev.substr(6);
    if (data == "[DONE]") {
      r.done = true;
      continue;
    }
    auto const j = json::parse(data, nullptr, false);
    if (!j.is_object()) continue;
    if (j.contains("error")) r.error = j["error"].value("message", "?");
    if (j.contains("choices"))
      for (auto const& c : j["choices"])
        if (c.contains("finish_reason") && c["finish_reason"].is_string())
          r.finish = c["finish_reason"];
    if (j.contains("tf") && j["tf"].contains("token_sha")) r.sha = j["tf"]["token_sha"];
  }
  return r;
}

// An OpenAI error object with a reason.
bool is_error_object(std::string const& body, std::string* code = nullptr) {
  auto const j = json::parse(body, nullptr, false);
  bool const ok = j.is_object() && j.contains("error") && j["error"].is_object() &&
                  j["error"].value("message", "").size() > 0;
  if (ok && code) *code = j["error"]["code"].is_string() ? j["error"]["code"] : "";
  return ok;
}

pid_t child_serve_pid() {
  for (auto const& e : fs::directory_iterator("/proc")) {
    auto const name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    auto const close = stat.rfind(')');
    if (close == std::string::npos || stat.find("(serve)") == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == ::getpid())
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

std::size_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

std::string random_text(std::mt19937& rng, std::size_t chars) {
  static constexpr char letters[] = "abcdefghijklmnopqrstuvwxyz     ,.";
  std::string s(chars, ' ');
  for (auto& c : s) c = letters[rng() % (sizeof letters - 1)];
  return s;
}

json completion_body(std::string const& prompt, int max_tokens, bool stream, bool greedy) {
  json b = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"stream", stream}};
  if (greedy) b["temperature"] = 0;
  return b;
}

// A greedy prompt and its solo reply.
struct solo_case {
  std::string prompt;
  int max_tokens = 0;
  std::string sha;
};

// What one run counted.
struct tally {
  std::atomic<int> complete{0}, error_replies{0}, compared{0}, mismatched{0}, cancelled{0},
      half_open{0}, slow_readers{0}, malformed{0}, raw_malformed{0}, oversize{0}, failures{0};
  std::mutex mu;
  std::map<std::string, int> error_codes;
  std::vector<std::string> problems;
  void problem(std::string p) {
    failures++;
    std::lock_guard lk(mu);
    if (problems.size() < 40) problems.push_back(std::move(p));
  }
  void error_code(std::string const& c) {
    error_replies++;
    std::lock_guard lk(mu);
    error_codes[c.empty() ? "(none)" : c]++;
  }
};

// A socket the run leaves open on purpose until its end.
struct held_socket {
  int fd = -1;
  int kind = 0;  // 0: nothing sent; 1: half a request; 2: a whole request, never read
  steady::time_point since;
};

struct load_run {
  load_run(int p, settings const& c, std::vector<solo_case> const& s) : port(p), cfg(c), solos(s) {}
  int port = 0;
  settings const& cfg;
  std::vector<solo_case> const& solos;
  std::size_t context = 0, pool_tokens = 0, max_body = 4u << 20;
  int read_timeout_s = 0, idle_timeout_s = 0;
  tally t;
  std::mutex held_mu;
  std::vector<held_socket> held;
  std::atomic<std::size_t> slowest_ms{0};  // the longest request, from its start to its end

  // Names a request that got no reply: the error, whether the connection was a kept one, and
  // how long it took.
  static std::string no_reply(std::string const& what, httplib::Error e, bool kept,
                              steady::time_point start) {
    return fmt::format("{}: no reply ({}) on a {} connection after {:.3f} s", what,
                       httplib::to_string(e), kept ? "kept" : "new",
                       std::chrono::duration<double>(steady::now() - start).count());
  }

  // A whole or streamed reply from httplib: classified, and compared with its solo reply.
  void normal(httplib::Client& c, std::string const& path, json const& body,
              solo_case const* solo) {
    bool const stream = body.value("stream", false);
    bool const kept = c.is_socket_open() != 0;
    auto const start = steady::now();
    if (!stream) {
      auto r = c.Post(path.c_str(), body.dump(), "application/json");
      if (!r) return t.problem(no_reply(path, r.error(), kept, start));
      if (r->status == 200) {
        auto const j = json::parse(r->body, nullptr, false);
        if (!j.is_object() || !j.contains("choices") ||
            !j["choices"][0]["finish_reason"].is_string())
          return t.problem("200 without a whole reply: " + r->body.substr(0, 200));
        t.complete++;
        if (solo) {
          t.compared++;
          if (j["tf"]["token_sha"] != solo->sha) t.mismatched++;
        }
        return;
      }
      std::string code;
      if (!is_error_object(r->body, &code))
        return t.problem(std::to_string(r->status) +
                         " without an error object: " + r->body.substr(0, 200));
      return t.error_code(std::to_string(r->status) + " " + code);
    }
    std::string got;
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](char const* d, std::size_t n, std::uint64_t, std::uint64_t) {
      got.append(d, n);
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    if (!c.send(req, res, err)) return t.problem(no_reply(path + " streamed", err, kept, start));
    if (res.status != 200) {
      std::string code;
      if (!is_error_object(got, &code))
        return t.problem(std::to_string(res.status) +
                         " without an error object: " + got.substr(0, 200));
      return t.error_code(std::to_string(res.status) + " " + code);
    }
    auto const s = parse_sse(got);
    if (!s.error.empty()) return t.error_code("stream error");
    if (!s.done || s.finish.empty())
      return t.problem("a stream without [DONE] or finish_reason: " + got.substr(0, 200));
    t.complete++;
    if (solo) {
      t.compared++;
      if (s.sha != solo->sha) t.mismatched++;
    }
  }

  // A streamed request on a raw socket: hung up after its first bytes, read slowly to the end,
  // or never read at all.
  void raw_stream(json const& body, int mode, solo_case const* solo) {
    int const fd = connect_to(port);
    if (fd < 0) return t.problem("connect failed");
    if (!send_all(fd, post_text("/v1/completions", body.dump()))) {
      ::close(fd);
      return t.problem("send failed");
    }
    auto const deadline = steady::now() + cfg.deadline;
    std::string buf;
    if (mode == 0) {  // hang up mid-stream
      read_until(fd, buf, deadline, [](std::string const& b) {
        return b.find("data: ") != std::string::npos || b.find("\r\n\r\n{") != std::string::npos;
      });
      ::close(fd);
      t.cancelled++;
      return;
    }
    if (mode == 2) {  // never read, never close
      std::lock_guard lk(held_mu);
      held.push_back({fd, 2, steady::now()});
      t.half_open++;
      return;
    }
    // A slow reader: 256 bytes every 5 ms.
    bool const whole = read_until(
        fd, buf, deadline, [](std::string const& b) { return parse_reply(b).whole; }, 256, 5ms);
    ::close(fd);
    if (!whole) return t.problem("slow reader: no whole reply by the deadline");
    auto const r = parse_reply(buf);
    t.slow_readers++;
    if (r.status != 200) {
      std::string code;
      if (!is_error_object(r.body, &code))
        return t.problem("slow reader: " + std::to_string(r.status) + " without a reason");
      return t.error_code(std::to_string(r.status) + " " + code);
    }
    auto const s = parse_sse(r.body);
    if (!s.done || s.finish.empty()) return t.problem("slow reader: stream not finished");
    t.complete++;
    if (solo) {
      t.compared++;
      if (s.sha != solo->sha) t.mismatched++;
    }
  }

  // Malformed HTTP on a raw socket: a request line that is not one, or headers over the limit.
  void raw_malformed(std::mt19937& rng) {
    int const fd = connect_to(port);
    if (fd < 0) return t.problem("connect failed");
    bool const huge = rng() % 2 == 0;
    std::string const req =
        huge ? "GET /health HTTP/1.1\r\nX-Pad: " + std::string(70000, 'p') + "\r\n\r\n"
             : std::string("THIS IS NOT HTTP\r\n\r\n");
    send_all(fd, req);
    std::string buf;
    read_until(fd, buf, steady::now() + cfg.deadline,
               [](std::string const& b) { return parse_reply(b).whole; });
    ::close(fd);
    auto const r = parse_reply(buf);
    if (r.status != (huge ? 431 : 400))
      return t.problem("malformed HTTP answered " + std::to_string(r.status) + ": " +
                       buf.substr(0, 120));
    if (huge && !is_error_object(r.body))
      return t.problem("431 without an error object: " + r.body.substr(0, 120));
    t.raw_malformed++;
  }

  // A client thread's httplib client: kept alive between requests, but made afresh when it has
  // idled near the server's idle limit (a reuse then would race the server's close).
  struct client_slot {
    int port;
    std::chrono::seconds deadline;
    std::chrono::milliseconds stale;
    std::unique_ptr<httplib::Client> c;
    steady::time_point last;
    bool used = false;
    httplib::Client& get() {
      if (!c || steady::now() - last > stale) {
        c = std::make_unique<httplib::Client>("127.0.0.1", port);
        c->set_read_timeout(deadline);
        c->set_keep_alive(true);
      }
      used = true;
      return *c;
    }
  };

  void one(int i, client_slot& slot) {
    std::mt19937 rng(static_cast<unsigned>(7919 * i + 17));
    auto const kind = static_cast<int>(rng() % 100);
    auto const& solo = solos[rng() % solos.size()];
    if (kind < 6) {
      static std::vector<std::string> const bad = {
          "{not json",
          "[1,2]",
          R"({"prompt": 5})",
          R"({"prompt": "x", "max_tokens": "7"})",
          R"({"prompt": "x", "temperature": 9})",
          "{\"prompt\": \"\xff\xfe\"}",
          R"({"prompt": "truncated", "max_tok)",
          "",
          std::string(2000, '[') + std::string(2000, ']'),
          R"({"messages": [{"role": "wizard", "content": "x"}]})"};
      auto const& body = bad[rng() % bad.size()];
      bool const chat = body.find("messages") != std::string::npos;
      auto& c = slot.get();
      bool const kept = c.is_socket_open() != 0;
      auto const start = steady::now();
      auto r = c.Post(chat ? "/v1/chat/completions" : "/v1/completions", body, "application/json");
      if (!r) return t.problem(no_reply("malformed body", r.error(), kept, start));
      if (r->status != 400 || !is_error_object(r->body))
        return t.problem("malformed body answered " + std::to_string(r->status) + ": " +
                         r->body.substr(0, 160));
      t.malformed++;
    } else if (kind < 8) {
      raw_malformed(rng);
    } else if (kind < 14) {
      // Past the context, or past every page of the pool (or over the body limit: 413).
      std::size_t const tokens = kind < 11 ? context + 1 + rng() % context : pool_tokens + 1;
      auto const prompt = random_text(rng, std::min<std::size_t>(8 * tokens, max_body - 1024));
      auto& c = slot.get();
      bool const kept = c.is_socket_open() != 0;
      auto const start = steady::now();
      auto r = c.Post("/v1/completions", completion_body(prompt, 8, false, true).dump(),
                      "application/json");
      if (!r) return t.problem(no_reply("oversize prompt", r.error(), kept, start));
      std::string code;
      bool const ok = (r->status == 400 || r->status == 413) && is_error_object(r->body, &code) &&
                      (code == "context_length_exceeded" || code == "larger_than_pool" ||
                       code == "request_too_large");
      if (!ok)
        return t.problem("oversize prompt answered " + std::to_string(r->status) + ": " +
                         r->body.substr(0, 160));
      t.oversize++;
    } else if (kind < 22) {
      raw_stream(completion_body(random_text(rng, 1 + rng() % 100), 200, true, false), 0, nullptr);
    } else if (kind < 26) {
      int const fd = connect_to(port);
      if (fd < 0) return t.problem("connect failed");
      int const what = static_cast<int>(rng() % 3);
      if (what == 1) send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le");
      if (what == 2) {
        ::close(fd);
        raw_stream(completion_body(solo.prompt, solo.max_tokens, rng() % 2 == 0, true), 2, &solo);
        return;
      }
      std::lock_guard lk(held_mu);
      held.push_back({fd, what, steady::now()});
      t.half_open++;
    } else if (kind < 30) {
      raw_stream(completion_body(solo.prompt, solo.max_tokens, true, true), 1, &solo);
    } else if (kind < 65) {
      normal(slot.get(), "/v1/completions",
             completion_body(solo.prompt, solo.max_tokens, kind < 47, true), &solo);
    } else {
      bool const chat = kind >= 90;
      bool const stream = rng() % 5 < 2;
      int const max_tokens = 1 + static_cast<int>(rng() % 64);
      auto const text = random_text(rng, 1 + rng() % 160);
      json body = chat ? json{{"messages", {{{"role", "user"}, {"content", text}}}},
                              {"max_tokens", max_tokens},
                              {"stream", stream}}
                       : completion_body(text, max_tokens, stream, false);
      normal(slot.get(), chat ? "/v1/chat/completions" : "/v1/completions", body, nullptr);
    }
  }

  void run() {
    std::atomic<int> next{0};
    std::vector<std::thread> clients;
    for (int k = 0; k < cfg.clients; ++k)
      clients.emplace_back([&] {
        client_slot slot{
            port, cfg.deadline, std::chrono::milliseconds(idle_timeout_s * 200), {}, {}};
        for (int i = next++; i < cfg.requests; i = next++) {
          auto const start = steady::now();
          slot.used = false;
          one(i, slot);
          auto const now = steady::now();
          if (slot.used) slot.last = now;
          auto const ms = static_cast<std::size_t>(
              std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count());
          for (auto m = slowest_ms.load(); ms > m && !slowest_ms.compare_exchange_weak(m, ms);) {
          }
        }
      });
    for (auto& th : clients) th.join();
  }

  // The held sockets, once each is past its limit: a half request got a 408 with a reason, and
  // the server closed every one (a whole request was answered first).
  void check_held() {
    auto const wait = std::chrono::seconds(std::max(read_timeout_s, idle_timeout_s) + 2);
    for (auto const& h : held) {
      auto const until = h.since + wait;
      if (steady::now() < until) std::this_thread::sleep_until(until);
      std::string buf;
      read_until(h.fd, buf, steady::now() + 5s, [](std::string const&) { return false; });
      bool eof = false;
      buf += read_now(h.fd, eof);
      ::close(h.fd);
      auto const r = parse_reply(buf);
      if (h.kind == 0 && !buf.empty())
        t.problem("an idle connection got bytes: " + buf.substr(0, 80));
      std::string code;
      if (h.kind == 1 &&
          (r.status != 408 || !is_error_object(r.body, &code) || code != "request_timeout"))
        t.problem("a half request got " + buf.substr(0, 120));
      if (h.kind == 2 && !(r.whole && (r.status == 200 || is_error_object(r.body))))
        t.problem("a request never read was not answered: " + buf.substr(0, 120));
    }
    held.clear();
  }
};

// Polls /v1/load: running within --parallel, promised pages within the pool.
struct load_poller {
  int port;
  std::size_t parallel;
  std::atomic<bool> on{true};
  std::atomic<int> polls{0}, over_running{0}, over_promised{0}, failed{0};
  std::atomic<std::size_t> max_running{0}, max_promised{0};
  std::thread th;
  load_poller(int p, std::size_t par) : port(p), parallel(par) {
    th = std::thread([this] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(30s);
      while (on) {
        auto r = c.Get("/v1/load");
        if (!r || r->status != 200) {
          failed++;
        } else {
          auto const j = json::parse(r->body);
          auto const running = j["running"].get<std::size_t>();
          auto const promised = j["pages"]["promised"].get<std::size_t>();
          over_running += running > parallel || j["max_running_seen"].get<std::size_t>() > parallel;
          over_promised += promised > j["pages"]["total"].get<std::size_t>();
          max_running = std::max<std::size_t>(max_running, running);
          max_promised = std::max<std::size_t>(max_promised, promised);
          polls++;
        }
        std::this_thread::sleep_for(20ms);
      }
    });
  }
  ~load_poller() { stop(); }
  void stop() {
    on = false;
    if (th.joinable()) th.join();
  }
};

std::string counts_line(std::string const& log) {
  std::smatch m;
  std::regex const line("connections at stop: ([^\n]*)");
  return std::regex_search(log, m, line) ? m[1].str() : std::string();
}

std::uint64_t count_of(std::string const& line, std::string const& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("(?:^|, )" + name + " (\\d+)"))) return ~0ull;
  return std::stoull(m[1]);
}

}  // namespace

TEST_CASE("request framing: where a request ends in the bytes received so far") {
  using namespace tf::serve::detail;
  auto f = [](std::string_view b) { return frame_request(b, 1024, 64); };
  CHECK(f("GET / HTTP/1.1\r\nHost: x\r\n").state == frame_state::incomplete);
  CHECK(f("GET / HTTP/1.1\r\nHost: x\r\n\r\n").state == frame_state::complete);
  CHECK(f("GET / HTTP/1.1\r\nHost: x\r\n\r\n").end == 27);
  std::string const post = "POST /v HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello";
  CHECK(f(post.substr(0, post.size() - 1)).state == frame_state::incomplete);
  CHECK(f(post).end == post.size());
  CHECK(f(post + "GET / HTTP/1.1\r\n").end == post.size());  // a pipelined request follows
  std::string const chunked = "POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  CHECK(f(chunked + "5\r\nhello\r\n").state == frame_state::incomplete);
  CHECK(f(chunked + "5\r\nhello\r\n0\r\n\r\n").end == chunked.size() + 15);
  CHECK(f(chunked + "5;x=y\r\nhello\r\n0\r\nT: v\r\n\r\n").state == frame_state::complete);
  CHECK(f(chunked + "zz\r\n").state == frame_state::complete);  // bad chunks: httplib's 400
  CHECK(f(chunked + "zz\r\n").end == chunked.size());
  CHECK(f("POST /v HTTP/1.1\r\nContent-Length: x1\r\n\r\n").state == frame_state::complete);
  CHECK(f("POST /v HTTP/1.1\r\nContent-Length: 100\r\n\r\n").state == frame_state::headers_only);
  CHECK(f("POST /v HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n").state ==
        frame_state::headers_only);
  CHECK(f("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a')).state == frame_state::too_large);
  CHECK(f("GET / HTTP/1.1\r\nX: " + std::string(2000, 'a') + "\r\n\r\n").state ==
        frame_state::too_large);
}

TEST_CASE("load and faults over HTTP: 2 runs of mixed requests from 32 clients") {
  auto const cfg = load_settings();
  if (cfg.real && !real_model_ready()) return;
  REQUIRE(fs::exists(serve_binary()));
  REQUIRE(fs::exists(cfg.model));
  raise_fd_limit();
  std::size_t const parallel = 4, context = cfg.real ? 2048 : 512;
  int const read_timeout = 2, idle_timeout = 5;
  auto const t0 = steady::now();
  // One forward thread on the tiny model: a second one only waits on its sibling here.
  std::vector<std::string> args{cfg.model.string(),
                                "--parallel",
                                std::to_string(parallel),
                                "--context",
                                std::to_string(context),
                                "--threads",
                                cfg.real ? "2" : "1",
                                "--max-queue",
                                "16",
                                "--prompt-cache-gib",
                                "0.01",
                                "--read-timeout",
                                std::to_string(read_timeout),
                                "--keep-alive-timeout",
                                std::to_string(idle_timeout)};
  // The fixtures carry no chat template (the default model has a built-in one).
  if (!cfg.real) args.insert(args.end(), {"--chat-template", TF_FIXTURES_DIR "/jinja/qwen3.jinja"});
  // glibc's malloc keeps freed memory in up to 8 arenas per core, so the server's RSS after a run
  // wanders by tens of MiB with how the run's peaks fell (measured: 82-102 MiB over six runs).
  // Two arenas and large blocks given back at free make RSS track what is kept: a leak.
  ::setenv("MALLOC_ARENA_MAX", "2", 1);
  ::setenv("MALLOC_MMAP_THRESHOLD_", "65536", 1);
  live_server s(args);
  ::unsetenv("MALLOC_ARENA_MAX");
  ::unsetenv("MALLOC_MMAP_THRESHOLD_");
  REQUIRE(s.wait_ready(180s));
  int const port = s.port();
  pid_t const pid = child_serve_pid();
  REQUIRE(pid > 0);
  auto const pool_tokens = load_of(port)["pages"]["total"].get<std::size_t>() * 256;

  // The oversize prompts are past what they claim: 8 characters make at least one token.
  {
    std::mt19937 rng(1);
    httplib::Client c("127.0.0.1", port);
    auto r = c.Post("/tokenize", json{{"content", random_text(rng, 8 * (context + 1))}}.dump(),
                    "application/json");
    REQUIRE(r);
    REQUIRE(r->status == 200);
    REQUIRE(json::parse(r->body)["tokens"].size() > context);
  }

  // Solo replies first, one request at a time.
  std::vector<solo_case> solos;
  {
    std::mt19937 rng(42);
    for (int i = 0; i < 16; ++i) {
      solo_case c{random_text(rng, 5 + rng() % 240), 1 + static_cast<int>(rng() % 48), ""};
      c.sha = complete(port, c.prompt, c.max_tokens).at("tf").at("token_sha");
      solos.push_back(c);
    }
  }
  auto const rss_start = rss_kib(pid);

  std::vector<std::size_t> rss_after;
  std::vector<double> seconds;
  int total_complete = 0, total_errors = 0, total_compared = 0;
  int const runs =
      std::getenv("TF_LOAD_RUNS") ? std::max(2, std::atoi(std::getenv("TF_LOAD_RUNS"))) : 2;
  for (int run = 0; run < runs; ++run) {
    INFO("run " << run + 1);
    load_run lr(port, cfg, solos);
    lr.context = context;
    lr.pool_tokens = pool_tokens;
    lr.read_timeout_s = read_timeout;
    lr.idle_timeout_s = idle_timeout;
    load_poller poll(port, parallel);
    auto const start = steady::now();
    lr.run();
    seconds.push_back(std::chrono::duration<double>(steady::now() - start).count());
    lr.check_held();
    poll.stop();
    for (auto const& p : lr.t.problems) UNSCOPED_INFO(p);
    std::string codes;
    for (auto const& [code, n] : lr.t.error_codes) codes += " " + code + ": " + std::to_string(n);
    auto const& t = lr.t;
    std::printf(
        "load run %d: %d requests, %d clients, %.1f s (slowest request %.2f s): %d whole replies, "
        "%d error replies "
        "(%s ), %d greedy compared (%d differ), %d hung up mid-stream, %d half-open, %d slow "
        "readers, %d malformed bodies, %d malformed HTTP, %d oversize, %d failures; /v1/load "
        "polled %d times, max running %zu, max promised %zu\n",
        run + 1, cfg.requests, cfg.clients, seconds.back(), lr.slowest_ms / 1000.0,
        t.complete.load(), t.error_replies.load(), codes.c_str(), t.compared.load(),
        t.mismatched.load(), t.cancelled.load(), t.half_open.load(), t.slow_readers.load(),
        t.malformed.load(), t.raw_malformed.load(), t.oversize.load(), t.failures.load(),
        poll.polls.load(), poll.max_running.load(), poll.max_promised.load());
    CHECK(t.failures == 0);
    CHECK(lr.slowest_ms < static_cast<std::size_t>(cfg.deadline.count()) * 1000);
    CHECK(t.mismatched == 0);
    CHECK(t.compared > 0);
    CHECK(t.complete > 0);
    CHECK(t.oversize > 0);
    CHECK(t.malformed > 0);
    CHECK(t.cancelled > 0);
    CHECK(t.half_open > 0);
    // Every request is accounted for: answered, refused with a reason, hung up or held.
    CHECK(t.complete + t.error_replies + t.cancelled + t.malformed + t.raw_malformed + t.oversize +
              t.half_open + t.failures ==
          cfg.requests);
    CHECK(poll.polls > 10);
    CHECK(poll.failed == 0);
    CHECK(poll.over_running == 0);
    CHECK(poll.over_promised == 0);
    total_complete += t.complete;
    total_errors += t.error_replies;
    total_compared += t.compared;
    // The server still serves, and every stream has ended.
    auto after = load_of(port);
    for (int i = 0; i < 200 && after["running"].get<int>() + after["queued"].get<int>() != 0; ++i) {
      std::this_thread::sleep_for(50ms);
      after = load_of(port);
    }
    INFO(after.dump());
    CHECK(after["running"] == 0);
    CHECK(after["pages"]["promised"] == 0);
    CHECK(complete(port, solos[0].prompt, solos[0].max_tokens).at("tf").at("token_sha") ==
          solos[0].sha);
    std::this_thread::sleep_for(500ms);
    rss_after.push_back(rss_kib(pid));
    std::printf("load run %d: server RSS %zu KiB\n", run + 1, rss_after.back());
  }
  auto const growth_kib =
      static_cast<long long>(rss_after[1]) - static_cast<long long>(rss_after[0]);
  std::printf(
      "load: RSS %zu KiB after start and solo runs, %zu KiB after run 1, %zu KiB after run 2 "
      "(growth %lld KiB; bound 8192)\n",
      rss_start, rss_after[0], rss_after[1], growth_kib);
  CHECK(rss_after[0] > 0);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's allocator keeps freed blocks in quarantine; its leak check at exit
  // (a non-zero exit, checked below) stands in for the bound.
  WARN("RSS growth not bounded under AddressSanitizer: " << growth_kib << " KiB");
#else
  CHECK(growth_kib < 8 * 1024);
#endif

  CHECK(s.stop() == 0);
  auto const log = s.log();
  check_census(log);
  auto const line = counts_line(log);
  INFO(log);
  REQUIRE(!line.empty());
  CHECK(count_of(line, "open") == 0);
  CHECK(count_of(line, "peak open") <= 1024);
  CHECK(count_of(line, "timed out \\(408\\)") > 0);
  CHECK(count_of(line, "headers too large") > 0);
  std::printf(
      "load: %d whole replies and %d error replies in all, %d greedy compared; server: %s; "
      "test %.1f s\n",
      total_complete, total_errors, total_compared, line.c_str(),
      std::chrono::duration<double>(steady::now() - t0).count());
}

TEST_CASE(
    "500 idle and trickling connections: a new client is served within 2 s; past the cap, "
    "503") {
  REQUIRE(fs::exists(serve_binary()));
  raise_fd_limit();
  auto const model = fs::path(TF_FIXTURES_DIR) / "qwen/tiny/tiny-q8_0.gguf";
  std::size_t const cap = 520;
  live_server s({model.string(), "--parallel", "2", "--context", "256", "--threads", "1",
                 "--prompt-cache-gib", "0.01", "--max-connections", std::to_string(cap),
                 "--keep-alive-timeout", "6", "--read-timeout", "8"});
  REQUIRE(s.wait_ready(120s));
  int const port = s.port();
  auto const opened = steady::now();
  std::vector<int> idle, trickling;
  for (int i = 0; i < 250; ++i) {
    idle.push_back(connect_to(port));
    trickling.push_back(connect_to(port));
  }
  REQUIRE(std::count(idle.begin(), idle.end(), -1) == 0);
  REQUIRE(std::count(trickling.begin(), trickling.end(), -1) == 0);
  // The trickle: a request's headers, one byte per socket every 50 ms, never finished.
  std::string const head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(400, 's');
  std::atomic<bool> trickle{true};
  std::thread trickler([&] {
    for (std::size_t k = 0; trickle && k < head.size(); ++k) {
      for (int fd : trickling) ::send(fd, head.data() + k, 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(50ms);
    }
  });
  auto timed_request = [&](int& status, std::string& body) {
    auto const t = steady::now();
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(10);
    c.set_read_timeout(10);
    auto r = c.Post("/v1/completions", R"({"prompt":"hello","max_tokens":4,"temperature":0})",
                    "application/json");
    status = r ? r->status : -1;
    body = r ? r->body : httplib::to_string(r.error());
    if (r && r->status == 503) body += " Retry-After: " + r->get_header_value("Retry-After");
    return std::chrono::duration<double>(steady::now() - t).count();
  };
  // New clients while the 500 are held: each served, the slowest within 2 s.
  double slowest = 0;
  int served = 0;
  for (int i = 0; i < 20; ++i) {
    int status = 0;
    std::string body;
    slowest = std::max(slowest, timed_request(status, body));
    INFO(body);
    CHECK(status == 200);
    served += status == 200;
    std::this_thread::sleep_for(50ms);
  }
  CHECK(slowest < 2.0);
  // Up to the cap with 20 more idle connections: the next client gets a 503 with a reason.
  std::vector<int> extra;
  for (int i = 0; i < 20; ++i) extra.push_back(connect_to(port));
  std::this_thread::sleep_for(200ms);
  int status = 0;
  std::string body;
  double const refused_in = timed_request(status, body);
  INFO(body);
  CHECK(status == 503);
  CHECK(body.find("too_many_connections") != std::string::npos);
  CHECK(body.find("Retry-After: 1") != std::string::npos);
  CHECK(refused_in < 2.0);
  for (int fd : extra) ::close(fd);
  // Room again once they close (the server sees the close on its next wake-up).
  double back_in = 0;
  for (int i = 0; i < 40 && status != 200; ++i) {
    back_in += timed_request(status, body);
    if (status != 200) std::this_thread::sleep_for(50ms);
  }
  CHECK(status == 200);
  auto const held_for = std::chrono::duration<double>(steady::now() - opened).count();
  std::printf(
      "connections: 250 idle + 250 trickling held for %.1f s: %d of 20 new clients served, the "
      "slowest in %.3f s; at the cap of %zu a new client got %d in %.3f s\n",
      held_for, served, slowest, cap, 503, refused_in);
  CHECK(held_for < 6.0);  // all of the above ran while every held connection was still open
  // The limits: an idle connection is closed after 6 s; a request still arriving gets a 408
  // with a reason 8 s after its first byte.
  std::this_thread::sleep_until(opened + 9s);
  trickle = false;
  trickler.join();
  int idle_closed = 0, timed_out = 0;
  for (int fd : idle) {
    bool eof = false;
    auto const got = read_now(fd, eof);
    idle_closed += eof && got.empty();
    ::close(fd);
  }
  for (int fd : trickling) {
    bool eof = false;
    auto const got = read_now(fd, eof);
    timed_out +=
        got.rfind("HTTP/1.1 408", 0) == 0 && got.find("request_timeout") != std::string::npos;
    ::close(fd);
  }
  CHECK(idle_closed == 250);
  CHECK(timed_out == 250);
  CHECK(s.stop() == 0);
  auto const log = s.log();
  auto const line = counts_line(log);
  INFO(log);
  CHECK(count_of(line, "refused over the cap") >= 1);
  CHECK(count_of(line, "idle closed") >= 250);
  CHECK(count_of(line, "timed out \\(408\\)") == 250);
  CHECK(count_of(line, "peak open") <= cap);
  CHECK(count_of(line, "open") == 0);
  check_census(log);
}
