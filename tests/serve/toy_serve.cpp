// toy_serve: the OpenAI server over the deterministic toy model (or, with --hybrid, the hybrid toy
// with recurrent-state slots), for the live-server tests. Sized by the memory budget as serve is;
// prints the same listening, budget and stop-census lines, and serves serve's chat page.
#include <tf/error.hpp>
#include <tf/memory/budget.hpp>
#include <tf/serve/http_server.hpp>
#include <tf/serve/web_page.hpp>
#include <tf_serve_web.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "hybrid_toy.hpp"
#include "scripted_model.hpp"
#include "toy_model.hpp"

namespace {

std::atomic<int> g_signal{0};

extern "C" void on_signal(int s) {
  g_signal.store(s);
}

// --flag value pairs, and the valueless --hybrid.
std::map<std::string, std::string> parse_args(int argc, char** argv, bool& hybrid) {
  std::map<std::string, std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (a == "--hybrid") {
      hybrid = true;
      continue;
    }
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) throw tf::error("toy_serve: bad argument '{}'", a);
    out[a] = argv[++i];
  }
  return out;
}

std::size_t number(std::map<std::string, std::string> const& args, std::string const& flag,
                   std::size_t fallback) {
  auto it = args.find(flag);
  if (it == args.end()) return fallback;
  try {
    std::size_t used = 0;
    auto v = std::stoull(it->second, &used);
    if (used == it->second.size()) return static_cast<std::size_t>(v);
  } catch (std::exception const&) {
  }
  throw tf::error("toy_serve: {} wants a number, got '{}'", flag, it->second);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tf::serve;
  try {
    bool hybrid = false;
    auto const args = parse_args(argc, argv, hybrid);
    for (auto const& [flag, value] : args)
      if (flag != "--parallel" && flag != "--context" && flag != "--max-queue" &&
          flag != "--threads" && flag != "--port" && flag != "--reserve-gib" &&
          flag != "--cap-gib" && flag != "--prompt-cache-gib" && flag != "--chat-template" &&
          flag != "--script" && flag != "--load-ms")
        throw tf::error("toy_serve: unknown flag {}", flag);
    std::size_t const context = number(args, "--context", 4096);
    std::size_t const max_queue = number(args, "--max-queue", 64);
    std::size_t const page_tokens = 256;
    http_config hc;
    hc.port = static_cast<int>(number(args, "--port", 8080));
    api_server server(hc);
    install_web_page(server.http(), tf::serve::generated::web_assets);
    int const bound = server.bind();
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    std::thread http([&] { server.listen(); });
    // A start that fails (the budget) still stops the listener before unwinding.
    struct listener_guard {
      api_server& s;
      std::thread& t;
      ~listener_guard() {
        for (int i = 0; i < 2000 && !s.http().is_running(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        s.stop();
        t.join();
      }
    } guard{server, http};
    fmt::print(stderr, "tf: listening on http://{}:{} (loading)\n", hc.host, bound);
    // --load-ms N: a load that takes N ms in ten steps, so /health and the page show it.
    if (auto const ms = number(args, "--load-ms", 0); ms > 0)
      for (int step = 1; step <= 10; ++step) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms / 10));
        server.set_progress(step / 10.0);
      }

    // The toy's "KV" is 64 bytes a token; the hybrid toy's state is 32 bytes a slot, and a
    // stream takes two (its own and its lane's prompt-end snapshot).
    std::size_t const state_bytes = sizeof(hybrid_toy_model::state);
    tf::memory::budget_options o;
    o.window_tokens = context;
    if (!args.contains("--parallel") || args.at("--parallel") != "auto")
      o.parallel = static_cast<std::uint32_t>(number(args, "--parallel", 4));
    o.max_auto_streams = 8;
    o.kv_bytes_per_token = 64;
    o.state_bytes_per_stream = hybrid ? 2 * state_bytes : 0;
    o.page_tokens = static_cast<std::uint32_t>(page_tokens);
    o.prompt_cache_bytes = tf::memory::gib;
    if (auto it = args.find("--prompt-cache-gib"); it != args.end())
      o.prompt_cache_bytes = tf::memory::parse_gib(it->second, "--prompt-cache-gib");
    if (auto it = args.find("--reserve-gib"); it != args.end())
      o.reserve_bytes = tf::memory::parse_gib(it->second, "--reserve-gib");
    if (auto it = args.find("--cap-gib"); it != args.end())
      o.cap_bytes = tf::memory::parse_gib(it->second, "--cap-gib");
    o.device_label = "CPU (toy)";
    auto const b = tf::memory::start_budget(tf::memory::memory_kind::host,
                                            tf::memory::system_proc_reader(), {}, o);
    for (auto const& line : b.lines) fmt::print(stderr, "{}\n", line);
    std::size_t const parallel = b.streams;
    std::size_t const pages = static_cast<std::size_t>(
        b.kv_pages + (b.page_bytes == 0 ? 0 : b.prompt_cache_budget_bytes / b.page_bytes));
    host_config const cfg{parallel, context, max_queue, page_tokens};
    // --chat-template FILE renders chats with that template (bytes as tokens); --script FILE
    // (JSON [{"when", "reply"}]) makes every reply a scripted one (tests/serve/scripted_model.hpp).
    toy_codec codec;
    if (auto it = args.find("--chat-template"); it != args.end())
      codec.template_src = tf::serve::test::read_file_text(it->second);
    std::shared_ptr<served_model> model;
    if (hybrid) {
      // A lane's snapshot slot and its stream's slot, plus one a lane for kept prompt states.
      std::size_t const slots = 3 * parallel;
      model = std::make_shared<lane_served_model<hybrid_toy_model, hybrid_toy_family, toy_codec>>(
          std::make_unique<hybrid_toy_model>(pages, page_tokens, slots), codec, cfg);
    } else {
      model = std::make_shared<lane_served_model<toy_model, toy_family, toy_codec>>(
          std::make_unique<toy_model>(pages, page_tokens), codec, cfg);
    }
    if (auto it = args.find("--script"); it != args.end())
      model = std::make_shared<tf::serve::test::scripted_model>(
          model, tf::serve::test::scripts_from_json(
                     nlohmann::json::parse(tf::serve::test::read_file_text(it->second))));
    // The page opens in chat mode when --chat-template gives the toy a template.
    server.set_start_info({b.lines, args.contains("--chat-template")});
    server.set_model(model);
    server.set_progress(1.0);
    fmt::print(stderr, "tf: {} toy model: {} streams at once at a {}-token window; {} KV pages\n",
               hybrid ? "hybrid" : "paged", parallel, context, pages);
    while (g_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto census = model->shutdown(std::chrono::milliseconds(5000));
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
