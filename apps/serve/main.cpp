// serve: the OpenAI-compatible server. serve [MODEL] --parallel N|auto --context T; with no
// MODEL it serves the default model. Every token goes through the lane host's rounds.
#include <families/gemma/gemma3_load.hpp>
#include <tf/error.hpp>
#include <tf/model/default_model.hpp>
#include <tf/model/model_file.hpp>
#include <tf/serve/gemma_backend.hpp>
#include <tf/serve/http_server.hpp>
#include <tf/serve/toy_model.hpp>
#include <tf/tokenizer/from_gguf.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <thread>

namespace {

std::atomic<int> g_signal{0};
tf::serve::api_server* g_server = nullptr;

extern "C" void on_signal(int s) {
  g_signal.store(s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"serve: an OpenAI-compatible server for tf models"};
  std::string model_path, parallel_s = "4", backend = "cpu", host = "127.0.0.1", api_key;
  std::size_t context = 8192, threads = std::max(1u, std::thread::hardware_concurrency()),
              max_queue = 64, max_body = 4u << 20;
  int port = 8080, read_timeout = 10;
  double prompt_cache_gib = 0;
  bool no_update_check = false, toy = false;
  app.add_option("model", model_path,
                 "GGUF file or Hugging Face folder (default: the default model)");
  app.add_option("--parallel", parallel_s, "streams at once: N or auto");
  app.add_option("--context", context, "token window per stream");
  app.add_option("--backend", backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--host", host, "address to bind (default loopback only)");
  app.add_option("--port", port, "port (0: any free port)");
  app.add_option("--threads", threads, "CPU threads for the forward");
  app.add_option("--prompt-cache-gib", prompt_cache_gib, "kept-prompt budget in GiB");
  app.add_option("--api-key", api_key, "require Authorization: Bearer KEY on /v1 (or TF_API_KEY)");
  app.add_option("--max-queue", max_queue, "requests that may wait for admission");
  app.add_option("--max-body-bytes", max_body, "request bodies above this get 413");
  app.add_option("--read-timeout", read_timeout, "seconds to read a request's headers and body");
  app.add_flag("--no-update-check", no_update_check, "accepted; tf never checks for updates");
  app.add_flag("--toy", toy, "serve the deterministic toy model (tests)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (backend == "cuda")
      throw tf::error(
          "tf: --backend cuda: this serve binary was built without CUDA (TF_CUDA=OFF); "
          "use --backend cpu or rebuild with -DTF_CUDA=ON");
    if (api_key.empty())
      if (char const* k = std::getenv("TF_API_KEY")) api_key = k;
    std::size_t parallel = 0;
    if (parallel_s == "auto") {
      parallel = 4;  // the CPU forward keeps f32 KV; four streams is the CPU default
    } else {
      try {
        parallel = std::stoul(parallel_s);
      } catch (std::exception const&) {
        throw tf::error("tf: --parallel wants N or auto, got '{}'", parallel_s);
      }
      if (parallel == 0) throw tf::error("tf: --parallel must be >= 1");
    }
    tf::serve::http_config hc;
    hc.host = host;
    hc.port = port;
    hc.api_key = api_key;
    hc.max_body_bytes = max_body;
    hc.read_timeout_s = read_timeout;
    hc.max_connections = std::max<std::size_t>(64, 2 * (parallel + max_queue));
    tf::serve::api_server server(hc);
    int bound = server.bind();
    g_server = &server;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    std::thread http([&] { server.listen(); });
    fmt::print(stderr, "tf: listening on http://{}:{} (loading)\n", host, bound);

    tf::serve::host_config cfg{parallel, context, max_queue, 256};
    std::size_t const page_tokens = 256;
    std::size_t const pages = parallel * ((context + page_tokens - 1) / page_tokens);
    std::shared_ptr<tf::serve::serving_backend> be;
    std::optional<tf::model::model_file> file;  // the weights point into its mapping: keep it open
    if (toy) {
      be = std::make_shared<tf::serve::lane_backend<tf::serve::toy_model, tf::serve::toy_family,
                                                    tf::serve::toy_codec>>(
          std::make_unique<tf::serve::toy_model>(pages, page_tokens), tf::serve::toy_codec{}, cfg);
      fmt::print(
          stderr,
          "tf: toy model: {} streams at once at a {}-token window; {} KV pages of {} tokens\n",
          parallel, context, pages, page_tokens);
    } else {
      auto path = tf::model::resolve_model_path(model_path.empty() ? std::nullopt
                                                                   : std::optional(model_path));
      fmt::print(stderr, "tf: loading {}\n", path.string());
      server.set_progress(0.1);
      file.emplace(tf::model::model_file::open(path));
      if (!file->gguf())
        throw tf::error("tf: serve reads GGUF models for now; {} is not one", path.string());
      auto arch = file->architecture();
      if (arch != "gemma3")
        throw tf::error("tf: serve has a forward for gemma3 only; {} is '{}'", path.string(), arch);
      auto weights = tf::families::gemma::load_weights(*file);
      server.set_progress(0.6);
      auto tok = tf::tokenizer::load_tokenizer(*file->gguf());
      auto const& hp = weights.hp;
      double per_stream_gib = 2.0 * hp.num_layers * hp.num_kv_heads * hp.head_dim * 4.0 *
                              static_cast<double>(context) / (1u << 30);
      fmt::print(stderr,
                 "CPU ({} threads): model {}; {} streams at once, {:.2f} GiB each at a {}-token "
                 "window; {} KV pages of {} tokens; prompt_cache_budget_bytes {}\n",
                 threads, path.filename().string(), parallel, per_stream_gib, context, pages,
                 page_tokens, static_cast<std::uint64_t>(prompt_cache_gib * (1u << 30)));
      be = std::make_shared<tf::serve::lane_backend<
          tf::serve::gemma_model, tf::families::gemma::gemma3, tf::serve::gemma_codec>>(
          std::make_unique<tf::serve::gemma_model>(std::move(weights), pages, page_tokens,
                                                   static_cast<int>(threads)),
          tf::serve::gemma_codec(std::move(tok), path.filename().string()), cfg);
    }
    server.set_backend(be);
    server.set_progress(1.0);
    fmt::print(stderr, "tf: serving on http://{}:{} ({} streams, {}-token window)\n", host, bound,
               parallel, context);
    while (g_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    fmt::print(stderr, "tf: signal {}: finishing running requests, then stopping\n",
               g_signal.load());
    auto census = be->shutdown(std::chrono::milliseconds(5000));
    server.stop();
    http.join();
    if (!census.balanced()) {
      fmt::print(stderr, "tf: error: the KV census at stop does not balance: {}\n", census.line());
      return 2;
    }
    fmt::print(stderr, "tf: KV census at stop: {}\n", census.line());
    return 0;
  } catch (std::exception const& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
