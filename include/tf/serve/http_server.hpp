#pragma once
/// The OpenAI-compatible HTTP API over a served_model: the server, its connection cap, API-key
/// auth, CORS, body limits and timeouts. The routes live in routes_completions.hpp (chat and text
/// completions) and routes_info.hpp (health, models, load, metrics, tokenize, detokenize).
#include <tf/serve/openai_request.hpp>
#include <tf/serve/served_model.hpp>
#include <tf/serve/server_state.hpp>

// httplib's default backlog of 5 drops connections when many clients connect at once.
#ifndef CPPHTTPLIB_LISTEN_BACKLOG
#define CPPHTTPLIB_LISTEN_BACKLOG 512
#endif
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <tf/serve/routes_completions.hpp>
#include <tf/serve/routes_info.hpp>

#include <fmt/format.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

namespace tf::serve {

/// True on a thread answering a connection over the cap (set by capped_task_queue).
inline thread_local bool tl_over_connection_cap = false;

/// httplib's task queue with a cap: the first `cap` open connections run on the serving pool;
/// any more run on a small overflow pool whose requests are answered 503 + Retry-After, so a
/// client over the cap hears why instead of waiting in an unseen queue.
class capped_task_queue final : public httplib::TaskQueue {
 public:
  capped_task_queue(std::size_t cap, std::size_t overflow)
      : cap_(cap), main_(cap), over_(overflow) {}

  void enqueue(std::function<void()> fn) override {
    if (open_.fetch_add(1) < cap_) {
      main_.enqueue([this, fn = std::move(fn)] {
        fn();
        open_.fetch_sub(1);
      });
      return;
    }
    open_.fetch_sub(1);
    over_.enqueue([fn = std::move(fn)] {
      tl_over_connection_cap = true;
      fn();
      tl_over_connection_cap = false;
    });
  }
  void shutdown() override {
    main_.shutdown();
    over_.shutdown();
  }

 private:
  std::size_t cap_;
  std::atomic<std::size_t> open_{0};
  httplib::ThreadPool main_, over_;
};

/// Compares two strings in time that depends only on their lengths.
inline bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  std::size_t const n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

/// The server: owns the httplib server; the served model arrives once it has loaded.
class api_server {
 public:
  explicit api_server(http_config cfg) : state_(std::move(cfg)), completions_(state_) { routes(); }
  api_server(api_server const&) = delete;
  api_server& operator=(api_server const&) = delete;

  /// Installs the loaded model; /health answers 200 from then on.
  void set_model(std::shared_ptr<served_model> m) { state_.set_model(std::move(m)); }
  std::shared_ptr<served_model> model() const { return state_.model(); }
  /// Loading progress shown by /health while loading (0..1).
  void set_progress(double p) { state_.set_progress(p); }

  /// Binds; returns the port (a free one when cfg.port is 0). Throws tf::error when it cannot.
  int bind() {
    auto const& cfg = state_.config();
    int port = cfg.port;
    if (port == 0) {
      port = http_.bind_to_any_port(cfg.host.c_str());
    } else if (!http_.bind_to_port(cfg.host.c_str(), port)) {
      port = -1;
    }
    if (port <= 0) throw error("tf: cannot listen on {}:{}", cfg.host, cfg.port);
    port_ = port;
    return port;
  }
  /// Serves until stop(); call bind() first.
  void listen() { http_.listen_after_bind(); }
  /// Stops accepting and returns from listen().
  void stop() { http_.stop(); }
  int port() const { return port_; }
  httplib::Server& http() { return http_; }

 private:
  static void send_error(httplib::Response& res, api_error const& e) {
    res.status = e.status;
    res.set_content(e.body().dump(), "application/json");
  }

  static bool has_body(httplib::Request const& req) {
    auto const length = req.get_header_value("Content-Length");
    return req.get_header_value("Transfer-Encoding") == "chunked" ||
           (!length.empty() && length.find_first_not_of('0') != std::string::npos);
  }

  // Routes behind the API key: /v1 and the tokenizer's.
  static bool needs_key(std::string const& path) {
    return path.rfind("/v1", 0) == 0 || path == "/tokenize" || path == "/detokenize";
  }

  // Answers a connection over the cap (503) or a keyed route without the API key (401); false
  // when the request may go on.
  bool turned_away(httplib::Request const& req, httplib::Response& res) {
    auto const& cfg = state_.config();
    if (tl_over_connection_cap) {
      if (auto b = model()) b->stats().rejected_connections++;
      res.set_header("Retry-After", "1");
      res.set_header("Connection", "close");
      send_error(res, api_error(503,
                                fmt::format("the server has its {} connections open; retry soon",
                                            cfg.max_connections),
                                "server_error", "", "too_many_connections"));
      return true;
    }
    // A CORS preflight carries no credentials; it is answered without the key.
    if (cfg.api_key.empty() || !needs_key(req.path) || req.method == "OPTIONS") return false;
    auto h = req.get_header_value("Authorization");
    std::string_view const prefix = "Bearer ";
    bool ok = h.size() > prefix.size() && std::string_view(h).substr(0, prefix.size()) == prefix &&
              constant_time_equal(std::string_view(h).substr(prefix.size()), cfg.api_key);
    if (ok) return false;
    if (auto b = model()) b->stats().rejected_auth++;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, api_error(401, "a valid API key is required (Authorization: Bearer KEY)",
                              "invalid_request_error", "", "invalid_api_key"));
    return true;
  }

  // --cors-origin: every answer allows the origin; OPTIONS answers a browser's preflight.
  void cors() {
    auto const& origin = state_.config().cors_origin;
    if (origin.empty()) return;
    httplib::Headers h{{"Access-Control-Allow-Origin", origin}};
    if (origin != "*") h.emplace("Vary", "Origin");
    http_.set_default_headers(h);
    http_.Options(".*", [](httplib::Request const& req, httplib::Response& res) {
      auto const asked = req.get_header_value("Access-Control-Request-Headers");
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     asked.empty() ? std::string("Authorization, Content-Type") : asked);
      res.set_header("Access-Control-Max-Age", "86400");
    });
  }

  void routes() {
    auto const& cfg = state_.config();
    auto const cap = std::max<std::size_t>(cfg.max_connections, 1);
    auto const overflow = std::max<std::size_t>(cfg.overflow_workers, 1);
    http_.new_task_queue = [cap, overflow] { return new capped_task_queue(cap, overflow); };
    http_.set_payload_max_length(cfg.max_body_bytes);
    http_.set_read_timeout(cfg.read_timeout_s, 0);
    http_.set_write_timeout(cfg.write_timeout_s, 0);
    http_.set_keep_alive_max_count(100);
    http_.set_keep_alive_timeout(5);
    // A request with a body is turned away only after routing has read that body: closing a
    // socket with unread bytes resets it, and the client would never see the answer.
    http_.set_pre_routing_handler([this](httplib::Request const& req, httplib::Response& res) {
      if (has_body(req)) return httplib::Server::HandlerResponse::Unhandled;
      return turned_away(req, res) ? httplib::Server::HandlerResponse::Handled
                                   : httplib::Server::HandlerResponse::Unhandled;
    });
    http_.set_error_handler([this](httplib::Request const& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      // A request with a body skipped the pre-routing check; one to no route still needs the key.
      if (res.status == 404 && has_body(req) && turned_away(req, res)) return;
      if (res.status == 413)
        send_error(res, api_error(413, "the request body is over the server's limit",
                                  "invalid_request_error", "", "request_too_large"));
      else if (res.status == 404)
        send_error(res, api_error(404, "no such route", "invalid_request_error", "", "not_found"));
      else
        send_error(res, api_error(res.status, fmt::format("HTTP {}", res.status),
                                  res.status >= 500 ? "server_error" : "invalid_request_error"));
    });
    http_.set_exception_handler(
        [](httplib::Request const&, httplib::Response& res, std::exception_ptr ep) {
          try {
            std::rethrow_exception(ep);
          } catch (api_error const& e) {
            send_error(res, e);
          } catch (std::exception const& e) {
            send_error(res, api_error(500, e.what(), "server_error"));
          } catch (...) {
            send_error(res, api_error(500, "unknown error", "server_error"));
          }
        });
    cors();
    install_info_routes(http_, state_);
    http_.Post("/v1/chat/completions", [this](httplib::Request const& req, httplib::Response& res) {
      if (!turned_away(req, res)) completions_.handle(req, res, true);
    });
    http_.Post("/v1/completions", [this](httplib::Request const& req, httplib::Response& res) {
      if (!turned_away(req, res)) completions_.handle(req, res, false);
    });
  }

  server_state state_;
  completion_routes completions_;
  httplib::Server http_;
  int port_ = 0;
};

}  // namespace tf::serve
