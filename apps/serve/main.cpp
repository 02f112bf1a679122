// serve: the OpenAI-compatible server. serve [MODEL] --parallel N|auto --context T; with no
// MODEL it serves the default model. Every token goes through the lane host's rounds.
#include <families/mtp_heads.hpp>
#include <tf/error.hpp>
#include <tf/memory/budget.hpp>
#include <tf/model/default_model.hpp>
#include <tf/model/model_file.hpp>
#include <tf/model/read_progress.hpp>
#include <tf/serve.hpp>
#include <tf/serve/detail/chat_template_file.hpp>
#include <tf/serve/detail/model_sampling.hpp>
#include <tf/serve/http_server.hpp>
#include <tf/serve/load_progress.hpp>
#include <tf/serve/model_draft.hpp>
#include <tf/serve/mtp_draft.hpp>
#include <tf/serve/open_served.hpp>
#include <tf/serve/web_page.hpp>
#include <tf/tokenizer/from_hf.hpp>
#include <tf_serve_web.hpp>
#if defined(TF_WITH_CUDA)
#include <tf/backend/cuda.hpp>
#endif
#if defined(TF_WITH_MPI)
#include "over_ranks.hpp"
#endif

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

namespace {

std::atomic<int> g_signal{0};
tf::serve::api_server* g_server = nullptr;

extern "C" void on_signal(int s) {
  g_signal.store(s);
}

/// Whether the model brings a chat template of its own (a GGUF's tokenizer.chat_template, a
/// folder's tokenizer_config.json chat_template); the page opens a model without one, a base
/// model, in completion mode.
bool own_chat_template(std::filesystem::path const& path) {
  if (std::filesystem::is_directory(path)) {
    auto const config = path / "tokenizer_config.json";
    if (!std::filesystem::exists(config)) return false;
    auto const j = tf::tokenizer::read_json_file(config);
    auto const it = j.find("chat_template");
    return it != j.end() && it->is_string() && !it->get<std::string>().empty();
  }
  auto const file = tf::model::model_file::open(path, tf::model::load_mode::map);
  auto const* g = file.gguf();
  return g != nullptr && !g->get_string("tokenizer.chat_template").value_or("").empty();
}

#if defined(TF_WITH_NCCL)
/// A CUDA rank's pool: its device's memory, or host memory for a GPU that shares it.
tf::serve::tp::rank_memory cuda_rank_memory(int device) {
  auto const d = tf::backend::cuda_parts::query_device(device);
  return {d.integrated ? tf::memory::memory_kind::unified : tf::memory::memory_kind::discrete,
          tf::backend::cuda_parts::device_memory_reader(device)};
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"serve: an OpenAI-compatible server for tf models"};
  std::string model_path, parallel_s = "4", backend = "cpu", host = "127.0.0.1", api_key,
                          load = "auto", kv_type = "f16", cuda_matmul = "own";
  int device = 0;
  std::size_t context = 8192, threads = std::max(1u, std::thread::hardware_concurrency()),
              max_queue = 64, max_body = 4u << 20, max_connections = 1024, keep_alive_max = 100;
  std::optional<std::size_t> http_threads;
  std::uint32_t max_auto_streams = 8;
  int port = 8080, read_timeout = 10, write_timeout = 30, keep_alive_timeout = 5;
  double prompt_cache_gib = 1.0;
  bool no_update_check = false;
  std::optional<std::string> reserve_gib, cap_gib;
  std::string alias, chat_template_file, cors_origin;
  std::optional<float> temp, top_p, min_p;
  std::optional<int> top_k;
  std::string draft = "ngram", draft_model;
  std::size_t draft_max = 8, draft_ngram_min = 2, draft_ngram_max = 4;
  int tp = 1;
  app.add_option("model", model_path,
                 "GGUF file or Hugging Face folder (default: the default model)");
  app.add_option("--parallel", parallel_s, "streams at once: N or auto");
  app.add_option("--context", context, "token window per stream");
  app.add_option("--backend", backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--device", device, "the CUDA device index for --backend cuda")
      ->check(CLI::Range(0, 1023));
  app.add_option("--cuda-matmul", cuda_matmul,
                 "--backend cuda matmuls: own (tf's kernel, faster decode) or cublaslt (cuBLASLt "
                 "for every weight, faster prefill; its workspace and tile are budgeted)");
  app.add_option("--host", host, "address to bind (default loopback only)");
  app.add_option("--port", port, "port (0: any free port)");
  app.add_option("--threads", threads, "CPU threads for the forward");
  app.add_option("--load", load,
                 "read: copy the weights into huge-page memory (faster CPU decode); map: mmap "
                 "them; auto: read on the cpu backend, map on cuda and with --tp")
      ->check(CLI::IsMember({"auto", "read", "map"}));
  app.add_option("--kv-type", kv_type, "CPU KV cache element type: f16 (as llama.cpp) or f32")
      ->check(CLI::IsMember({"f16", "f32"}));
  app.add_option("--prompt-cache-gib", prompt_cache_gib,
                 "kept-prompt budget in GiB (at most what the streams leave)");
  app.add_option("--reserve-gib", reserve_gib,
                 "memory kept back for the rest of the machine, GiB (else TF_MEMORY_RESERVE_GIB, "
                 "else 1/10 of RAM, at least 4)");
  app.add_option("--cap-gib", cap_gib,
                 "the most memory tf may use, GiB (else TF_MEMORY_CAP_GIB, else no cap)");
  app.add_option("--api-key", api_key, "require Authorization: Bearer KEY on /v1 (or TF_API_KEY)");
  app.add_option("--max-auto-streams", max_auto_streams, "the most streams --parallel auto serves");
  app.add_option("--max-queue", max_queue, "requests that may wait for admission");
  app.add_option("--max-body-bytes", max_body, "request bodies above this get 413");
  app.add_option("--read-timeout", read_timeout,
                 "seconds a request's headers and body may take from its first byte (then 408)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--write-timeout", write_timeout,
                 "seconds a reply may wait for the client to take bytes (then the request ends)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--keep-alive-timeout", keep_alive_timeout,
                 "seconds a connection may stay idle before or between requests (then closed)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--keep-alive-max", keep_alive_max, "requests per connection")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-connections", max_connections,
                 "open connections, idle ones included; past it 503 too_many_connections "
                 "(at most the open-file limit less 256)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--http-threads", http_threads,
                 "requests handled at once (default: 2 x (streams + --max-queue), at least 64)")
      ->check(CLI::Range(1, 65536));
  app.add_flag("--no-update-check", no_update_check, "accepted; tf never checks for updates");
  app.add_option("--alias", alias, "the model's name in /v1/models and replies");
  app.add_option("--chat-template", chat_template_file,
                 "a Jinja chat template file that replaces the model's");
  app.add_option("--cors-origin", cors_origin,
                 "allow browsers from ORIGIN ('*' for any): CORS headers and OPTIONS preflight");
  app.add_option("--temp", temp, "default temperature (else the model's, else 0.8)")
      ->check(CLI::Range(0.0, 2.0));
  app.add_option("--top-k", top_k, "default top-k, 0 off (else the model's, else 40)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--top-p", top_p, "default top-p, 1 off (else the model's, else 0.95)")
      ->check(CLI::Range(1e-9, 1.0));
  app.add_option("--min-p", min_p, "default min-p, 0 off (else the model's, else 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--draft", draft,
                 "speculative drafts, verified so that replies do not change: ngram (from the "
                 "stream's own prompt and output), model (--draft-model), mtp (the model's own "
                 "MTP head: Qwen3.5, Qwen3-Next, GLM-4.5) or none; a request's \"draft\": false "
                 "turns them off")
      ->check(CLI::IsMember({"ngram", "model", "mtp", "none"}));
  app.add_option("--draft-model", draft_model,
                 "with --draft model: a smaller model with the same tokenizer whose greedy "
                 "continuation is the draft, or a drafter that reads the target's KV (Gemma 4's "
                 "assistant GGUF)");
  app.add_option("--draft-max", draft_max, "most drafted tokens per stream and round")
      ->check(CLI::Range(0, 64));
  app.add_option("--draft-ngram-min", draft_ngram_min, "shortest n-gram a draft may follow")
      ->check(CLI::Range(1, 64));
  app.add_option("--draft-ngram-max", draft_ngram_max, "longest n-gram a draft may follow")
      ->check(CLI::Range(1, 64));
  app.add_option("--tp", tp,
                 "tensor parallelism: the model split over N ranks, launched as `mpirun -n N "
                 "serve MODEL --tp N`; rank 0 serves HTTP, the others replay its rounds")
      ->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);
  try {
#if !defined(TF_WITH_CUDA)
    if (backend == "cuda")
      throw tf::error(
          "tf: --backend cuda: this serve binary was built without CUDA (TF_CUDA=OFF); "
          "use --backend cpu or rebuild with -DTF_CUDA=ON");
#endif
    auto const matmul = tf::backend::parse_cuda_matmul(cuda_matmul);
#if defined(TF_WITH_MPI)
    // Declared before the model so that the ranks' link outlives it.
    std::optional<tf::serve::tp::ranks> ranks;
    tf::serve::rank_link* link = nullptr;
    if (tp > 1) {
      ranks.emplace(tp, &argc, &argv);
      if (backend == "cuda") {
#if defined(TF_WITH_NCCL)
        // A machine's ranks take its devices in turn from --device on; NCCL moves their floats.
        int const count = tf::backend::cuda_parts::device_count();
        if (count == 0)
          throw tf::error("tf: --tp {} --backend cuda: no CUDA device is visible", tp);
        device = (device + ranks->local_rank()) % count;
        ranks->devices.emplace(ranks->comm, device);
        fmt::print(stderr, "tf: rank {} on CUDA device {} of {}\n", ranks->comm.rank(), device,
                   count);
#else
        throw tf::error(
            "tf: --tp {} --backend cuda: this serve binary was built without NCCL; rebuild with "
            "TF_CUDA=ON where NCCL is installed (it ships with the CUDA toolkit), or use --backend "
            "cpu",
            tp);
#endif
      }
    }
#else
    if (tp > 1)
      throw tf::error(
          "tf: --tp {}: this serve binary was built without MPI (Debian: libopenmpi-dev); "
          "rebuild with it to split a model over ranks",
          tp);
#endif
    if (api_key.empty())
      if (char const* k = std::getenv("TF_API_KEY")) api_key = k;
    std::optional<std::uint32_t> fixed_parallel;  // nullopt: --parallel auto
    if (parallel_s != "auto") {
      try {
        std::size_t used = 0;
        auto const v = std::stoul(parallel_s, &used);
        if (used != parallel_s.size() || v > 4096) throw std::invalid_argument("range");
        fixed_parallel = static_cast<std::uint32_t>(v);
      } catch (std::exception const&) {
        throw tf::error("tf: --parallel wants N (1..4096) or auto, got '{}'", parallel_s);
      }
      if (*fixed_parallel == 0) throw tf::error("tf: --parallel must be >= 1");
    }
    if (context == 0) throw tf::error("tf: --context must be >= 1");
    if (!(prompt_cache_gib >= 0) || prompt_cache_gib > 1e6)
      throw tf::error("tf: --prompt-cache-gib wants a GiB count >= 0, got {}", prompt_cache_gib);
    std::optional<std::uint64_t> reserve_bytes, cap_bytes;
    if (reserve_gib) reserve_bytes = tf::memory::parse_gib(*reserve_gib, "--reserve-gib");
    if (cap_gib) cap_bytes = tf::memory::parse_gib(*cap_gib, "--cap-gib");
    std::size_t const parallel_guess = fixed_parallel.value_or(max_auto_streams);
    // A template that cannot be read or parsed stops the start before anything loads.
    std::string const chat_template =
        chat_template_file.empty() ? std::string()
                                   : tf::serve::detail::load_chat_template_file(chat_template_file);
    auto const path = tf::model::resolve_model_path(model_path.empty() ? std::nullopt
                                                                       : std::optional(model_path));
#if defined(TF_WITH_MPI)
    // A rank whose model file does not open (a path that differs on its machine) stops every rank
    // at once, naming it, before rank 0 reads the file on its own.
    if (ranks)
      tf::dist::on_every_rank(ranks->comm, "open its model file", [&] {
        return tf::model::model_file::open(path, tf::model::load_mode::map).tensors().size();
      });
    if (ranks && ranks->comm.rank() > 0) {
      // No HTTP here: this rank replays rank 0's calls on its shard of the model.
      tf::open_options fo;
      fo.threads = static_cast<int>(threads);
      fo.load = load == "read" ? tf::model::load_mode::read : tf::model::load_mode::map;
      fo.kv = kv_type == "f32" ? tf::kv_dtype::f32 : tf::kv_dtype::f16;
      fo.page_tokens = 256;
      fo.device = device;
      fo.cuda_matmul = matmul;
#if defined(TF_WITH_NCCL)
      if (backend == "cuda")
        return tf::serve::tp::follow<tf::backend::cuda>(
            ranks->comm, *ranks->devices, path, fo, reserve_bytes, cap_bytes,
            cuda_rank_memory(device), tf::backend::cuda::scratch_bytes({device, matmul}));
#endif
      return tf::serve::tp::follow<tf::backend::cpu>(ranks->comm, ranks->comm, path, fo,
                                                     reserve_bytes, cap_bytes, {}, 0);
    }
#endif
    // Sampling defaults: the flags, else the file's recommendation, else llama-server's.
    std::vector<std::string> notes;
    auto defaults = tf::serve::detail::model_sampling_defaults(path, notes);
    for (auto const& n : notes) fmt::print(stderr, "tf: sampling defaults: {}\n", n);
    notes.clear();
    if (temp) defaults.temperature = {*temp, "--temp"};
    if (top_k) defaults.top_k = {*top_k, "--top-k"};
    if (top_p) defaults.top_p = {*top_p, "--top-p"};
    if (min_p) defaults.min_p = {*min_p, "--min-p"};
    tf::serve::http_config hc;
    hc.alias = alias;
    hc.cors_origin = cors_origin;
    hc.sampling = defaults;
    hc.host = host;
    hc.port = port;
    hc.api_key = api_key;
    hc.max_body_bytes = max_body;
    hc.read_timeout_s = read_timeout;
    hc.write_timeout_s = write_timeout;
    hc.max_connections = tf::serve::detail::connections_within_fd_limit(max_connections, notes);
    for (auto const& n : notes) fmt::print(stderr, "tf: {}\n", n);
    tf::serve::connection_limits lim;
    lim.workers =
        http_threads.value_or(std::max<std::size_t>(64, 2 * (parallel_guess + max_queue)));
    lim.idle_timeout = std::chrono::seconds(keep_alive_timeout);
    lim.keep_alive_max = keep_alive_max;
    tf::serve::api_server server(hc, lim);
    tf::serve::install_web_page(server.http(), tf::serve::generated::web_assets);
    int bound = server.bind();
    g_server = &server;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGPIPE, SIG_IGN);
    std::thread http([&] { server.listen(); });
    // A start that fails (budget, load) still stops the listener before unwinding.
    struct listener_guard {
      tf::serve::api_server& s;
      std::thread& t;
      ~listener_guard() {
        if (!t.joinable()) return;
        // httplib's stop is a no-op until listen runs, so wait for it first.
        for (int i = 0; i < 2000 && !s.http().is_running(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        s.stop();
        t.join();
      }
    } guard{server, http};
    fmt::print(stderr, "tf: listening on http://{}:{} (loading)\n", host, bound);
    fmt::print(stderr, "tf: connections: {}\n", tf::serve::detail::limits_line(server.limits()));

    std::size_t const page_tokens = 256;
    tf::serve::start_info start;  // the budget lines and template origin, for the page
    // One reading sizes the start: weights, streams, window, KV pages and kept prompts.
    // `held`: of model_bytes, what is in memory already (a rank's copied slices), which the
    // reading no longer shows free.
    auto size_start = [&](std::uint64_t model_bytes, std::uint64_t kv_bytes_per_token,
                          std::uint64_t state_bytes_per_stream, std::uint64_t held) {
      tf::memory::budget_options o;
      o.model_bytes = model_bytes;
      o.window_tokens = context;
      o.parallel = fixed_parallel;
      o.max_auto_streams = max_auto_streams;
      o.kv_bytes_per_token = kv_bytes_per_token;
      o.state_bytes_per_stream = state_bytes_per_stream;
      o.page_tokens = static_cast<std::uint32_t>(page_tokens);
      o.prompt_cache_bytes =
          static_cast<std::uint64_t>(prompt_cache_gib * static_cast<double>(tf::memory::gib));
      o.device_label = fmt::format("CPU ({} threads)", threads);
      o.reserve_bytes = reserve_bytes;  // the flags win over the environment
      o.cap_bytes = cap_bytes;
      auto kind = tf::memory::memory_kind::host;
      tf::memory::device_reader device_reader;
#if defined(TF_WITH_CUDA)
      if (backend == "cuda") {
        auto const d = tf::backend::cuda_parts::query_device(device);
        o.device_label = tf::backend::cuda::label(d);
        // An integrated GPU shares host RAM: budgeted from /proc as the host is.
        kind = d.integrated ? tf::memory::memory_kind::unified : tf::memory::memory_kind::discrete;
        device_reader = tf::backend::cuda_parts::device_memory_reader(device);
        // The backend's fixed device scratch is counted with the weights it serves.
        if (auto const scratch = tf::backend::cuda::scratch_bytes({device, matmul}); scratch > 0) {
          o.model_bytes += scratch;
          fmt::print(stderr, "tf: cuBLASLt workspace and tile: {} MiB, counted with the weights\n",
                     scratch >> 20);
        }
      }
#endif
#if defined(TF_WITH_MPI)
      auto b = ranks ? tf::serve::tp::budget_over_ranks(ranks->comm, o, held, {kind, device_reader})
                     : tf::memory::start_budget(kind, tf::memory::system_proc_reader(),
                                                device_reader, o);
#else
      (void)held;  // only a split model's ranks hold weights before the budget
      auto b = tf::memory::start_budget(kind, tf::memory::system_proc_reader(), device_reader, o);
#endif
      for (auto const& line : b.lines) fmt::print(stderr, "{}\n", line);
      start.lines = b.lines;
      return b;
    };
    // KV storage is what the streams' windows need plus the kept-prompt budget, never more.
    auto pool_pages = [&](tf::memory::budget const& b) {
      auto const store = b.page_bytes == 0 ? 0 : b.prompt_cache_budget_bytes / b.page_bytes;
      return static_cast<std::size_t>(b.kv_pages + store);
    };
    std::size_t parallel = 0;
    auto const file_bytes = tf::model::file_bytes(path);
    fmt::print(stderr, "tf: loading {}\n", path.string());
    start.own_chat_template = !chat_template.empty() || own_chat_template(path);
    tf::open_options o;
    o.threads = static_cast<int>(threads);
    // Split over ranks, a rank maps the file: only its share of the weights becomes resident.
    o.load = load == "read" || (load == "auto" && backend == "cpu" && tp == 1)
                 ? tf::model::load_mode::read
                 : tf::model::load_mode::map;
    o.kv = kv_type == "f32" ? tf::kv_dtype::f32 : tf::kv_dtype::f16;
    o.page_tokens = static_cast<std::int32_t>(page_tokens);
    o.device = device;
    o.cuda_matmul = matmul;
    // With the weights read into memory, /health's progress is the share read so far; a mapped
    // file is read on first use, so it shows the start's steps.
    bool const reading = o.load == tf::model::load_mode::read;
    if (!reading) server.set_progress(0.1);
    std::optional<tf::serve::load_progress_watch> watch;
    tf::serve::draft_config drafts;
    if (draft == "ngram" && draft_max > 0) {
      drafts.source = std::make_shared<tf::serve::ngram_draft>(
          tf::serve::ngram_config{draft_ngram_min, draft_ngram_max});
      drafts.max_tokens = draft_max;
    }
    if (draft == "model" && draft_model.empty())
      throw tf::error("tf: --draft model needs --draft-model FILE");
    if (draft != "model" && !draft_model.empty())
      throw tf::error("tf: --draft-model is for --draft model (got --draft {})", draft);
    std::string draft_line;
    std::uint64_t draft_store_bytes = 0, draft_kv_bytes_per_token = 0;
    // A draft model file may be a drafter that reads the target's KV (Gemma 4's assistant).
    auto const draft_arch =
        draft == "model" && draft_max > 0
            ? std::string(tf::model::model_file::open(draft_model, tf::model::load_mode::map)
                              .architecture())
            : std::string();
    bool const target_kv_drafter = tf::families::builtin::knows_drafter(draft_arch);
    if (target_kv_drafter) {
      // A drafter that reads the target's KV (Gemma 4's assistant) opens beside the engine and
      // holds no KV; its mapped weights are counted with the target's.
      if (tp > 1)
        throw tf::error("tf: --draft-model {} reads the target's KV, which --tp splits",
                        draft_model);
      drafts.target_kv_drafter = draft_model;
      drafts.max_tokens = draft_max;
      draft_store_bytes = std::filesystem::file_size(draft_model);
      draft_line = fmt::format("{} {} over the target's KV", draft_arch, draft_model);
    } else if (draft == "model" && draft_max > 0) {
      // Its weights are read before the budget reads the machine, which then counts them. An
      // attention-only draft model keeps its KV in pages mirroring the target's: the budget adds
      // its bytes to each target position's, and the ledger promises both with one page. A
      // recurrent one keeps a store of its own (and an MTP head too), counted with the weights.
      tf::open_options dopt;
      dopt.threads = static_cast<int>(threads);
      dopt.page_tokens = static_cast<std::int32_t>(page_tokens);
      dopt.kv = o.kv;
      auto dm = tf::open(draft_model, dopt);
      auto const family = std::string(dm->family());
      auto const vocab = dm->vocab_size();
      auto const recurrent = dm->recurrent();
      auto const streams = recurrent ? std::max<std::size_t>(1, parallel_guess) : 1;
      auto const window = static_cast<std::int32_t>(recurrent ? context : page_tokens);
      auto source = std::make_shared<tf::serve::model_draft>(std::move(dm), streams, window);
      if (recurrent) {
        draft_store_bytes = source->model().store_bytes();
        draft_line = fmt::format("model {} ({}, vocabulary {}, {} streams of {} tokens)",
                                 draft_model, family, vocab, streams, context);
      } else {
        draft_kv_bytes_per_token = source->kv_bytes_per_token();
        draft_line = fmt::format("model {} ({}, vocabulary {}, its KV in the target's pages)",
                                 draft_model, family, vocab);
      }
      drafts.source = std::move(source);
      drafts.max_tokens = draft_max;
    }
    if (draft == "mtp" && draft_max > 0) {
      // On the target's backend, beside it (its forward hands the head the final hidden states).
      std::unique_ptr<tf::mtp_head> head;
#if defined(TF_WITH_CUDA)
      if (backend == "cuda")
        head = tf::families::open_mtp_head_on<tf::backend::cuda>(path, {device, matmul});
      else
#endif
        head = tf::families::open_mtp_head(path, static_cast<int>(threads));
      if (!head) throw tf::error("tf: --draft mtp: {} carries no MTP head", path.string());
      auto const streams = std::max<std::size_t>(1, parallel_guess);
      auto source = std::make_shared<tf::serve::mtp_draft>(std::move(head), streams,
                                                           static_cast<std::int32_t>(context));
      // Its KV, and on a device its own copies of the weights it reads.
      draft_store_bytes = source->head().store_bytes() + source->head().weight_bytes();
      drafts.source = std::move(source);
      drafts.max_tokens = draft_max;
      draft_line = fmt::format("mtp head ({} streams of {} tokens)", streams, context);
    }
    if (draft_kv_bytes_per_token > 0)
      fmt::print(stderr,
                 "tf: the draft model's KV: {} bytes a position, in pages mirroring the target's "
                 "(promised with them)\n",
                 draft_kv_bytes_per_token);
    if (draft_store_bytes > 0)
      fmt::print(stderr, "tf: the {} drafts' own memory: {} MiB, counted with the weights\n", draft,
                 (draft_store_bytes + (1u << 20) - 1) >> 20);
    auto size_pool = [&](tf::serve::model_costs const& c) {
      // A stream's recurrent state is held twice (its slot and its lane's snapshot), and once
      // more with drafts (the state before a verify row).
      auto const states = drafts.source ? 3u : 2u;
#if defined(TF_WITH_MPI)
      if (ranks) fmt::print(stderr, "{}\n", tf::serve::tp::weights_line(0, c, path));
#endif
      auto b = size_start(c.weight_bytes.value_or(file_bytes) + draft_store_bytes,
                          c.kv_bytes_per_token + draft_kv_bytes_per_token,
                          states * c.state_bytes_per_stream, c.weight_bytes_held);
      parallel = b.streams;
      auto const pages = pool_pages(b);
      fmt::print(stderr, "tf: {} forward on the {}, {} KV pages of {} tokens\n", c.family,
                 backend == "cuda" ? "GPU" : "CPU", pages, page_tokens);
      if (!reading) {
        server.set_progress(0.3);
      } else {
        // The weights are read next: bytes of total, rate and ETA, as a terminal or a log suits.
        auto const base = tf::model::bytes_read().load();
        watch.emplace([base] { return tf::model::bytes_read().load() - base; }, file_bytes,
                      tf::serve::load_progress_printer(
                          file_bytes, ::isatty(STDERR_FILENO) == 1,
                          [](std::string_view t) { fmt::print(stderr, "{}", t); }),
                      [&server](double f) { server.set_progress(f); });
      }
      return tf::serve::pool_size{parallel, pages};
    };
    tf::serve::host_config const host_cfg{0, context, max_queue, page_tokens};
    std::shared_ptr<tf::serve::served_model> be;
#if defined(TF_WITH_CUDA)
    if (backend == "cuda" && tp == 1) {
      be = tf::serve::open_served<tf::families::builtin, tf::backend::cuda>(
          path, o, host_cfg, size_pool, chat_template, drafts);
      fmt::print(stderr, "{}\n",
                 tf::backend::cuda::summary(tf::backend::cuda_parts::query_device(device), matmul));
    }
#endif
#if defined(TF_WITH_MPI)
    if (ranks) {
      tf::serve::served_over_ranks r;
#if defined(TF_WITH_NCCL)
      if (backend == "cuda")
        r = tf::serve::open_served_over_ranks<tf::families::builtin, tf::backend::cuda>(
            ranks->comm, *ranks->devices, path, o, host_cfg, size_pool, chat_template, drafts, {});
      else
#endif
        r = tf::serve::open_served_over_ranks(ranks->comm, path, o, host_cfg, size_pool,
                                              chat_template, drafts, {});
      be = std::move(r.served);
      link = r.link;
      fmt::print(stderr, "tf: the model is split over {} ranks; rank 0 serves\n", tp);
    }
#endif
    if (!be) be = tf::serve::open_served(path, o, host_cfg, size_pool, chat_template, drafts);
    if (watch) watch->finish();
    server.set_start_info(start);
    server.set_model(be);
    server.set_progress(1.0);
    fmt::print(stderr, "tf: sampling defaults: {}\n", defaults.line());
    if (be->drafting())
      fmt::print(stderr,
                 "tf: speculative drafts: {}, up to {} per stream and {} per round, verified by "
                 "the target's own sampler\n",
                 draft_line.empty()
                     ? fmt::format("ngram ({}-{} token matches)", draft_ngram_min, draft_ngram_max)
                     : draft_line,
                 draft_max, drafts.round_tokens);
    else if (drafts.source)
      fmt::print(stderr,
                 "tf: speculative drafts: off (no recurrent-state slot left for the state before "
                 "a verify row)\n");
    else
      fmt::print(stderr, "tf: speculative drafts: off\n");
    if (!chat_template.empty())
      fmt::print(stderr, "tf: chat template from {}\n", chat_template_file);
    fmt::print(stderr, "tf: serving {} on http://{}:{} ({} streams, {}-token window)\n",
               alias.empty() ? be->model_id() : alias, host, bound, parallel, context);
    auto rank_failed = [&] {
#if defined(TF_WITH_MPI)
      return link != nullptr && link->failed();
#else
      return false;
#endif
    };
    while (g_signal.load() == 0 && !rank_failed())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
#if defined(TF_WITH_MPI)
    if (rank_failed()) {
      // The running requests ended with the error; nothing more can run without the rank.
      fmt::print(stderr, "tf: error: a rank failed, stopping: {}\n", link->failure());
      auto census = be->shutdown(std::chrono::milliseconds(0));
      server.stop();
      http.join();
      fmt::print(stderr, "tf: KV census at stop: {}\n", census.line());
      return 3;
    }
#endif
    fmt::print(stderr, "tf: signal {}: finishing running requests, then stopping\n",
               g_signal.load());
    auto census = be->shutdown(std::chrono::milliseconds(5000));
    server.stop();
    http.join();
    fmt::print(stderr, "tf: connections at stop: {}\n",
               tf::serve::detail::counts_line(server.connection_counts()));
    if (!census.balanced()) {
      fmt::print(stderr, "tf: error: the KV census at stop does not balance: {}\n", census.line());
      return 2;
    }
    fmt::print(stderr, "tf: KV census at stop: {}\n", census.line());
#if defined(TF_WITH_MPI)
    if (link != nullptr && !tf::serve::tp::censuses_agree(link->finish(census))) return 2;
#endif
    return 0;
  } catch (std::exception const& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}
