#pragma once
/// The OpenAI-compatible HTTP API over a served_model: chat and text completions (SSE
/// streaming), models, health, load and metrics; API-key auth, body limits and timeouts.
#include <tf/serve/openai_request.hpp>
#include <tf/serve/served_model.hpp>
#include <tf/serve/sha256.hpp>
#include <tf/serve/text_assembler.hpp>

// httplib's default backlog of 5 drops connections when many clients connect at once.
#ifndef CPPHTTPLIB_LISTEN_BACKLOG
#define CPPHTTPLIB_LISTEN_BACKLOG 512
#endif
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

/// HTTP settings; safe defaults (loopback, limits on).
struct http_config {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                    // empty: no auth
  std::size_t max_body_bytes = 4u << 20;  // larger bodies get 413
  int read_timeout_s = 10;                // headers and body
  int write_timeout_s = 30;
  std::size_t max_connections = 64;  // connections served at once; more get 503 + Retry-After
  std::size_t overflow_workers = 4;  // threads that answer the connections over the cap
};

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
  explicit api_server(http_config cfg) : cfg_(std::move(cfg)) { routes(); }
  api_server(api_server const&) = delete;
  api_server& operator=(api_server const&) = delete;

  /// Installs the loaded model; /health answers 200 from then on.
  void set_model(std::shared_ptr<served_model> m) {
    std::lock_guard lock(mutex_);
    model_ = std::move(m);
  }
  std::shared_ptr<served_model> model() const {
    std::lock_guard lock(mutex_);
    return model_;
  }
  /// Loading progress shown by /health while loading (0..1).
  void set_progress(double p) { progress_.store(p); }

  /// Binds; returns the port (a free one when cfg.port is 0). Throws tf::error when it cannot.
  int bind() {
    int port = cfg_.port;
    if (port == 0) {
      port = http_.bind_to_any_port(cfg_.host.c_str());
    } else if (!http_.bind_to_port(cfg_.host.c_str(), port)) {
      port = -1;
    }
    if (port <= 0) throw error("tf: cannot listen on {}:{}", cfg_.host, cfg_.port);
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

  std::shared_ptr<served_model> ready_model() const {
    auto b = model();
    if (!b) throw api_error(503, "the model is still loading", "server_error", "", "model_loading");
    return b;
  }

  static bool has_body(httplib::Request const& req) {
    auto const length = req.get_header_value("Content-Length");
    return req.get_header_value("Transfer-Encoding") == "chunked" ||
           (!length.empty() && length.find_first_not_of('0') != std::string::npos);
  }

  // Answers a connection over the cap (503) or a /v1 request without the API key (401); false
  // when the request may go on.
  bool turned_away(httplib::Request const& req, httplib::Response& res) {
    if (tl_over_connection_cap) {
      if (auto b = model()) b->stats().rejected_connections++;
      res.set_header("Retry-After", "1");
      res.set_header("Connection", "close");
      send_error(res, api_error(503,
                                fmt::format("the server has its {} connections open; retry soon",
                                            cfg_.max_connections),
                                "server_error", "", "too_many_connections"));
      return true;
    }
    if (cfg_.api_key.empty() || req.path.rfind("/v1", 0) != 0) return false;
    auto h = req.get_header_value("Authorization");
    std::string_view const prefix = "Bearer ";
    bool ok = h.size() > prefix.size() && std::string_view(h).substr(0, prefix.size()) == prefix &&
              constant_time_equal(std::string_view(h).substr(prefix.size()), cfg_.api_key);
    if (ok) return false;
    if (auto b = model()) b->stats().rejected_auth++;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, api_error(401, "a valid API key is required (Authorization: Bearer KEY)",
                              "invalid_request_error", "", "invalid_api_key"));
    return true;
  }

  void routes() {
    auto const cap = std::max<std::size_t>(cfg_.max_connections, 1);
    auto const overflow = std::max<std::size_t>(cfg_.overflow_workers, 1);
    http_.new_task_queue = [cap, overflow] { return new capped_task_queue(cap, overflow); };
    http_.set_payload_max_length(cfg_.max_body_bytes);
    http_.set_read_timeout(cfg_.read_timeout_s, 0);
    http_.set_write_timeout(cfg_.write_timeout_s, 0);
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

    http_.Get("/health", [this](httplib::Request const&, httplib::Response& res) {
      if (model()) {
        res.set_content(R"({"status":"ok"})", "application/json");
      } else {
        res.status = 503;
        res.set_content(
            nlohmann::json{{"status", "loading"}, {"progress", progress_.load()}}.dump(),
            "application/json");
      }
    });
    http_.Get("/v1/models", [this](httplib::Request const&, httplib::Response& res) {
      auto b = ready_model();
      nlohmann::json j{{"object", "list"},
                       {"data",
                        {{{"id", b->model_id()},
                          {"object", "model"},
                          {"created", started_},
                          {"owned_by", "tf"},
                          {"context_length", b->config().context}}}}};
      res.set_content(j.dump(), "application/json");
    });
    http_.Get("/v1/load", [this](httplib::Request const&, httplib::Response& res) {
      auto b = ready_model();
      auto l = b->load();
      nlohmann::json j{{"running", l.running},
                       {"queued", l.queued},
                       {"requeued", l.requeued},
                       {"pages",
                        {{"free", l.pages_free},
                         {"held", l.pages_held},
                         {"promised", l.pages_promised},
                         {"store", l.pages_store},
                         {"total", l.pages_total}}},
                       {"lanes", {{"total", l.lanes}, {"free", l.lanes_free}}},
                       {"state_slots",
                        {{"free", l.state_slots_free},
                         {"held", l.state_slots_held},
                         {"total", l.state_slots_total}}},
                       {"max_running_seen", l.max_running_seen},
                       {"rounds", l.rounds}};
      res.set_content(j.dump(), "application/json");
    });
    http_.Get("/metrics", [this](httplib::Request const&, httplib::Response& res) {
      auto b = ready_model();
      res.set_content(b->stats().prometheus(b->load()), "text/plain; version=0.0.4");
    });
    http_.Post("/v1/chat/completions", [this](httplib::Request const& req, httplib::Response& res) {
      if (!turned_away(req, res)) complete(req, res, true);
    });
    http_.Post("/v1/completions", [this](httplib::Request const& req, httplib::Response& res) {
      if (!turned_away(req, res)) complete(req, res, false);
    });
  }

  // Per-request state shared with the content provider.
  struct job {
    openai_request req;
    std::shared_ptr<served_model> model;
    std::shared_ptr<request_stream> stream;
    text_assembler text{{}};
    std::vector<std::int32_t> tokens;
    nlohmann::json logprobs = nlohmann::json::array();
    std::string id;
    std::int64_t created = 0;
    std::size_t prompt_tokens = 0;
    finish_reason reason = finish_reason::length;
    std::string error;
    bool done = false, sent_role = false, sent_final = false;
  };

  void complete(httplib::Request const& hreq, httplib::Response& res, bool chat) {
    auto b = ready_model();
    auto j = std::make_shared<job>();
    try {
      j->req = parse_openai_request(hreq.body, chat);
    } catch (api_error const&) {
      b->stats().rejected_bad_request++;
      throw;
    }
    j->model = b;
    j->text = text_assembler(j->req.stop);
    j->created = static_cast<std::int64_t>(std::time(nullptr));
    j->id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", ++next_id_);
    generation_request g;
    try {
      g.prompt = chat ? b->encode_chat(j->req.messages, j->req.chat_template_kwargs)
                      : b->encode_text(j->req.prompt);
    } catch (error const& e) {
      // The chat template raised (e.g. roles that do not alternate): the request's fault.
      b->stats().rejected_bad_request++;
      throw api_error(400, e.what(), "invalid_request_error", chat ? "messages" : "prompt",
                      "invalid_value");
    }
    g.max_tokens = j->req.max_tokens;
    g.sampling = j->req.sampling;
    g.stop_tokens = b->stop_tokens();
    j->prompt_tokens = g.prompt.size();
    auto r = b->submit(std::move(g));
    if (r.status == submit_status::rejected) {
      switch (r.reason) {
        case reject_reason::queue_full:
          res.set_header("Retry-After", "1");
          throw api_error(503, r.message, "server_error", "", "queue_full");
        case reject_reason::stopping:
          res.set_header("Retry-After", "5");
          throw api_error(503, r.message, "server_error", "", "shutting_down");
        case reject_reason::context_length_exceeded:
          throw api_error(400, r.message, "invalid_request_error", chat ? "messages" : "prompt",
                          "context_length_exceeded");
        case reject_reason::larger_than_pool:
          throw api_error(400, r.message, "invalid_request_error", "max_tokens",
                          "larger_than_pool");
        default:
          throw api_error(400, r.message, "invalid_request_error");
      }
    }
    j->stream = r.stream;
    if (j->req.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, j](std::size_t, httplib::DataSink& sink) { return stream_step(*j, sink); },
          [j](bool ok) {
            if (!ok) j->stream->cancel();
          });
    } else {
      res.set_chunked_content_provider(
          "application/json",
          [this, j](std::size_t, httplib::DataSink& sink) { return whole_step(*j, sink); },
          [j](bool ok) {
            if (!ok) j->stream->cancel();
          });
    }
  }

  // Pulls what the engine produced; returns false on a stop string or the end.
  void pull(job& j, std::chrono::milliseconds wait) {
    if (j.done) return;
    auto c = j.stream->next(wait);
    auto b = j.model;
    for (auto& t : c.tokens) {
      if (j.text.stopped()) break;
      j.tokens.push_back(t.token);
      auto piece = b->piece(t.token);
      if (j.req.logprobs) j.logprobs.push_back(logprob_entry(*b, t, piece));
      if (j.text.add(piece)) {
        j.stream->cancel(finish_reason::stop);
        j.reason = finish_reason::stop;
        j.done = true;
      }
    }
    if (c.done && !j.done) {
      j.done = true;
      j.reason = c.reason;
      j.error = c.error;
    }
  }

  nlohmann::json logprob_entry(served_model& b, sample::sample_result const& t,
                               std::string const& piece) const {
    auto bytes = [](std::string const& s) {
      auto a = nlohmann::json::array();
      for (unsigned char c : s) a.push_back(c);
      return a;
    };
    auto top = nlohmann::json::array();
    for (auto const& alt : t.top) {
      auto p = b.piece(alt.token);
      top.push_back({{"token", valid_utf8(p)}, {"logprob", alt.logprob}, {"bytes", bytes(p)}});
    }
    return {{"token", valid_utf8(piece)},
            {"logprob", t.logprob},
            {"bytes", bytes(piece)},
            {"top_logprobs", top}};
  }

  // The string with invalid UTF-8 replaced by U+FFFD, so JSON can carry it.
  static std::string valid_utf8(std::string const& s) {
    return nlohmann::json::parse(dump(nlohmann::json(s))).get<std::string>();
  }

  nlohmann::json usage(job const& j) const {
    return {{"prompt_tokens", j.prompt_tokens},
            {"completion_tokens", j.tokens.size()},
            {"total_tokens", j.prompt_tokens + j.tokens.size()}};
  }
  nlohmann::json tf_block(job const& j) const {
    return {{"token_sha", token_sha(j.tokens)}, {"tokens", j.tokens.size()}};
  }
  static char const* reason_text(finish_reason r) {
    return r == finish_reason::stop ? "stop" : r == finish_reason::length ? "length" : "cancelled";
  }
  nlohmann::json completion_logprobs(job const& j) const {
    auto toks = nlohmann::json::array(), lps = nlohmann::json::array(),
         tops = nlohmann::json::array();
    for (auto const& e : j.logprobs) {
      toks.push_back(e["token"]);
      lps.push_back(e["logprob"]);
      auto m = nlohmann::json::object();
      for (auto const& t : e["top_logprobs"]) m[t["token"].get<std::string>()] = t["logprob"];
      tops.push_back(m);
    }
    return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}};
  }

  static std::string dump(nlohmann::json const& v) {
    return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  bool whole_step(job& j, httplib::DataSink& sink) {
    pull(j, std::chrono::milliseconds(250));
    if (!j.done) {
      // Whitespace before the JSON is valid and lets a write fail when the client has gone.
      if (!sink.write(" ", 1)) {
        j.stream->cancel();
        return false;
      }
      return true;
    }
    if (j.reason == finish_reason::error) {
      auto e = api_error(500, j.error, "server_error").body();
      auto s = dump(e);
      sink.write(s.data(), s.size());
      sink.done();
      return true;
    }
    auto text = j.text.take(true);
    nlohmann::json choice{{"index", 0}, {"finish_reason", reason_text(j.reason)}};
    if (j.req.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", text}};
      choice["logprobs"] =
          j.req.logprobs ? nlohmann::json{{"content", j.logprobs}} : nlohmann::json();
    } else {
      choice["text"] = text;
      choice["logprobs"] = j.req.logprobs ? completion_logprobs(j) : nlohmann::json();
    }
    nlohmann::json body{
        {"id", j.id},           {"object", j.req.chat ? "chat.completion" : "text_completion"},
        {"created", j.created}, {"model", j.model->model_id()},
        {"choices", {choice}},  {"usage", usage(j)},
        {"tf", tf_block(j)}};
    auto s = dump(body);
    sink.write(s.data(), s.size());
    sink.done();
    return true;
  }

  bool send_event(httplib::DataSink& sink, nlohmann::json const& v) {
    auto s = "data: " + dump(v) + "\n\n";
    return sink.write(s.data(), s.size());
  }

  nlohmann::json chunk(job const& j, nlohmann::json choices) const {
    return {{"id", j.id},
            {"object", j.req.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", j.created},
            {"model", j.model->model_id()},
            {"choices", std::move(choices)}};
  }

  bool stream_step(job& j, httplib::DataSink& sink) {
    if (j.req.chat && !j.sent_role) {
      j.sent_role = true;
      if (!send_event(sink, chunk(j, {{{"index", 0},
                                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}})))
        return cancel_write(j);
    }
    auto before = j.logprobs.size();
    pull(j, std::chrono::milliseconds(250));
    auto text = j.text.take(j.done);
    if (!text.empty() || j.logprobs.size() > before) {
      nlohmann::json c{{"index", 0}, {"finish_reason", nullptr}};
      auto lp = nlohmann::json::array();
      for (auto i = before; i < j.logprobs.size(); ++i) lp.push_back(j.logprobs[i]);
      if (j.req.chat) {
        c["delta"] = {{"content", text}};
        c["logprobs"] = j.req.logprobs ? nlohmann::json{{"content", lp}} : nlohmann::json();
      } else {
        c["text"] = text;
        c["logprobs"] = nullptr;
      }
      if (!send_event(sink, chunk(j, {c}))) return cancel_write(j);
    } else if (!j.done) {
      // An SSE comment keeps the line alive and notices a client that left.
      if (!sink.write(": \n\n", 4)) return cancel_write(j);
    }
    if (!j.done) return true;
    if (j.reason == finish_reason::error) {
      send_event(sink, api_error(500, j.error, "server_error").body());
    } else {
      nlohmann::json c{{"index", 0}, {"finish_reason", reason_text(j.reason)}};
      if (j.req.chat) {
        c["delta"] = nlohmann::json::object();
        c["logprobs"] = nullptr;
      } else {
        c["text"] = "";
        c["logprobs"] = nullptr;
      }
      auto last = chunk(j, {c});
      last["tf"] = tf_block(j);
      send_event(sink, last);
      if (j.req.include_usage) {
        auto u = chunk(j, nlohmann::json::array());
        u["usage"] = usage(j);
        u["tf"] = tf_block(j);
        send_event(sink, u);
      }
    }
    std::string const done = "data: [DONE]\n\n";
    sink.write(done.data(), done.size());
    sink.done();
    return true;
  }

  bool cancel_write(job& j) {
    j.stream->cancel();
    return false;
  }

  http_config cfg_;
  httplib::Server http_;
  mutable std::mutex mutex_;
  std::shared_ptr<served_model> model_;
  std::atomic<double> progress_{0.0};
  std::atomic<std::uint64_t> next_id_{0};
  std::int64_t started_ = static_cast<std::int64_t>(std::time(nullptr));
  int port_ = 0;
};

}  // namespace tf::serve
