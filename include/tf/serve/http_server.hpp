#pragma once
/// The OpenAI-compatible HTTP API over a served_model: the server, its connection gate (limits
/// and timeouts, detail/connection_gate.hpp), API-key auth, CORS and body limits. The routes live
/// in routes_completions.hpp (chat and text completions) and routes_info.hpp (health, models, load,
/// metrics, props, tokenize, detokenize).
#include <tf/serve/openai_request.hpp>
#include <tf/serve/served_model.hpp>
#include <tf/serve/server_state.hpp>

#include <tf/serve/detail/connection_gate.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <tf/serve/routes_completions.hpp>
#include <tf/serve/routes_info.hpp>

#include <fmt/format.h>

#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

namespace tf::serve {

using detail::connection_limits;

/// httplib's server with every accepted socket handed to the connection gate, which calls back
/// into process_request once a whole request has arrived (httplib's own loop would hold a thread
/// per connection for as long as the client keeps it open).
class gated_http final : public httplib::Server {
 public:
  explicit gated_http(detail::connection_gate& gate) : gate_(gate) {
    new_task_queue = [this] { return new inline_queue(gate_); };
  }
  /// Serves one request from `s`; the gate's serve callback.
  bool serve_one(httplib::Stream& s, bool close_connection, bool& closed) {
    return process_request(s, close_connection, closed, nullptr);
  }
  /// The listening socket's accept queue: httplib 0.11's compiled library listens with 5.
  void set_backlog(int n) {
    if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, n);
  }

 private:
  // The accept loop's queue: hands the socket on at once; shutdown stops the gate.
  struct inline_queue final : httplib::TaskQueue {
    explicit inline_queue(detail::connection_gate& g) : g_(g) { g_.start(); }
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override { g_.stop(); }
    detail::connection_gate& g_;
  };
  bool process_and_close_socket(socket_t sock) override {
    gate_.admit(sock);
    return true;
  }
  detail::connection_gate& gate_;
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
  /// `lim`'s max_connections, read and write timeouts come from `cfg`; the rest as given.
  explicit api_server(http_config cfg, connection_limits lim = {})
      : state_(std::move(cfg)),
        completions_(state_),
        gate_(
            limits_for(state_.config(), lim), replies_for(state_.config()),
            [this](httplib::Stream& s, bool close, bool& closed) {
              return http_.serve_one(s, close, closed);
            },
            [this] {
              if (auto b = model()) b->stats().rejected_connections++;
            }),
        http_(gate_) {
    routes();
  }
  api_server(api_server const&) = delete;
  api_server& operator=(api_server const&) = delete;

  /// Installs the loaded model; /health answers 200 from then on.
  void set_model(std::shared_ptr<served_model> m) { state_.set_model(std::move(m)); }
  std::shared_ptr<served_model> model() const { return state_.model(); }
  /// Loading progress shown by /health while loading (0..1).
  void set_progress(double p) { state_.set_progress(p); }
  /// The start's budget lines and template origin, for /props.
  void set_start_info(start_info i) { state_.set_start_info(std::move(i)); }

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
    http_.set_backlog(1024);  // many clients connecting at once are accepted, not dropped
    port_ = port;
    return port;
  }
  /// Serves until stop(); call bind() first.
  void listen() { http_.listen_after_bind(); }
  /// Stops accepting and returns from listen().
  void stop() { http_.stop(); }
  int port() const { return port_; }
  httplib::Server& http() { return http_; }
  /// The connection gate's limits and counts.
  connection_limits const& limits() const { return gate_.limits(); }
  detail::gate_counts connection_counts() const { return gate_.counts(); }

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

  // Routes behind the API key: /v1, the tokenizer's and /props (the page itself is open).
  static bool needs_key(std::string const& path) {
    return path.rfind("/v1", 0) == 0 || path == "/tokenize" || path == "/detokenize" ||
           path == "/props";
  }

  // Answers a keyed route without the API key (401); false when the request may go on.
  bool turned_away(httplib::Request const& req, httplib::Response& res) {
    auto const& cfg = state_.config();
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
    auto const& lim = gate_.limits();
    http_.set_payload_max_length(cfg.max_body_bytes);
    // The gate enforces these; httplib only names them in its Keep-Alive header.
    http_.set_keep_alive_max_count(lim.keep_alive_max);
    http_.set_keep_alive_timeout(
        std::chrono::duration_cast<std::chrono::seconds>(lim.idle_timeout).count());
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

  static connection_limits limits_for(http_config const& cfg, connection_limits lim) {
    lim.max_connections = cfg.max_connections;
    lim.read_timeout = std::chrono::seconds(cfg.read_timeout_s);
    lim.write_timeout = std::chrono::seconds(cfg.write_timeout_s);
    return lim;
  }

  // A whole response with an OpenAI error object, for the gate to send without a worker.
  static std::string canned(http_config const& cfg, int status, char const* phrase,
                            api_error const& e, std::string_view extra = {}) {
    auto const body = e.body().dump();
    std::string cors;
    if (!cfg.cors_origin.empty())
      cors = fmt::format("Access-Control-Allow-Origin: {}\r\n{}", cfg.cors_origin,
                         cfg.cors_origin == "*" ? "" : "Vary: Origin\r\n");
    return fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
        "Connection: close\r\n{}{}\r\n{}",
        status, phrase, body.size(), extra, cors, body);
  }

  static detail::gate_replies replies_for(http_config const& cfg) {
    detail::gate_replies r;
    r.over_capacity = canned(
        cfg, 503, "Service Unavailable",
        api_error(
            503,
            fmt::format("the server has its {} connections open; retry soon", cfg.max_connections),
            "server_error", "", "too_many_connections"),
        "Retry-After: 1\r\n");
    r.request_timeout =
        canned(cfg, 408, "Request Timeout",
               api_error(408,
                         fmt::format("the request did not arrive within {} s of its first byte",
                                     cfg.read_timeout_s),
                         "invalid_request_error", "", "request_timeout"));
    r.header_too_large = canned(cfg, 431, "Request Header Fields Too Large",
                                api_error(431, "the request line and headers are over the limit",
                                          "invalid_request_error", "", "headers_too_large"));
    return r;
  }

  server_state state_;
  completion_routes completions_;
  detail::connection_gate gate_;
  gated_http http_;
  int port_ = 0;
};

}  // namespace tf::serve
