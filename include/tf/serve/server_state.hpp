#pragma once
/// What every route of the HTTP server shares: its settings, the served model once it has loaded,
/// the loading progress, what the start reported and the reply ids.
#include <tf/sample/defaults.hpp>
#include <tf/serve/openai_request.hpp>
#include <tf/serve/served_model.hpp>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tf::serve {

/// HTTP settings; safe defaults (loopback, limits on, no CORS).
struct http_config {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;                    // empty: no auth
  std::size_t max_body_bytes = 4u << 20;  // larger bodies get 413
  int read_timeout_s = 10;                // headers and body
  int write_timeout_s = 30;
  std::size_t max_connections = 64;    // open connections; one more gets 503 + Retry-After
  std::string alias;                   // the served model's name (empty: the model's own id)
  std::string cors_origin;             // Access-Control-Allow-Origin (empty: no CORS headers)
  sample::sampling_defaults sampling;  // what a request's omitted sampling fields take
  // How often a non-streamed request checks that its client is still connected.
  int client_check_ms = 100;
};

/// What a start tells the web page (/props): its budget lines, and whether the model brings a chat
/// template of its own (the file's or --chat-template; a built-in fallback does not count).
struct start_info {
  std::vector<std::string> lines;
  bool own_chat_template = false;
};

/// The routes' shared state.
class server_state {
 public:
  explicit server_state(http_config cfg) : cfg_(std::move(cfg)) {}

  http_config const& config() const { return cfg_; }

  void set_model(std::shared_ptr<served_model> m) {
    std::lock_guard lock(mutex_);
    model_ = std::move(m);
  }
  std::shared_ptr<served_model> model() const {
    std::lock_guard lock(mutex_);
    return model_;
  }
  /// The model, or a 503 model_loading while it loads.
  std::shared_ptr<served_model> ready_model() const {
    auto b = model();
    if (!b) throw api_error(503, "the model is still loading", "server_error", "", "model_loading");
    return b;
  }
  /// The name replies and /v1/models give the model: --alias, else the model's own id.
  std::string model_id(served_model const& b) const {
    return cfg_.alias.empty() ? b.model_id() : cfg_.alias;
  }

  void set_start_info(start_info i) {
    std::lock_guard lock(mutex_);
    start_ = std::move(i);
  }
  start_info start() const {
    std::lock_guard lock(mutex_);
    return start_;
  }

  void set_progress(double p) { progress_.store(p); }
  double progress() const { return progress_.load(); }
  std::uint64_t next_id() { return ++next_id_; }
  std::int64_t started() const { return started_; }

 private:
  http_config cfg_;
  mutable std::mutex mutex_;
  std::shared_ptr<served_model> model_;
  start_info start_;
  std::atomic<double> progress_{0.0};
  std::atomic<std::uint64_t> next_id_{0};
  std::int64_t started_ = static_cast<std::int64_t>(std::time(nullptr));
};

}  // namespace tf::serve
