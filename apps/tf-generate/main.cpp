// tf-generate: streams a continuation of a prompt through tf::open (any family with a forward)
// and prints prompt and decode tokens/s. With no MODEL it uses the default model.
#include <tf/engine.hpp>
#include <tf/error.hpp>
#include <tf/model/default_model.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/tokenizer/stream_decoder.hpp>
#if defined(TF_WITH_CUDA)
#include <tf/backend/cuda.hpp>
#endif

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

// The chat prompt for one user turn (and an optional system message), through the model's chat
// template; ids with BOS added once.
std::vector<std::int32_t> chat_ids(tf::tokenizer::text_codec const& codec, std::string const& user,
                                   std::string const& system) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  if (codec.chat_template().empty())
    throw tf::error("tf: the model has no tokenizer.chat_template: drop --chat for a plain prompt");
  return codec.encode_chat(nlohmann::json(messages));
}

std::vector<std::int32_t> parse_ids(std::string const& s) {
  std::vector<std::int32_t> ids;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      std::size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      ids.push_back(static_cast<std::int32_t>(v));
    } catch (std::exception const&) {
      throw tf::error("tf-generate: --tokens wants comma-separated ids, got '{}'", item);
    }
  }
  return ids;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tf-generate: a continuation of a prompt, streamed, on the CPU or a CUDA GPU"};
  std::optional<std::string> model_path;
  std::string prompt, system, tokens_arg;
  int n_predict = 64, threads = 1, context = 0;
  std::string load = "read";
  bool chat = false, ignore_eos = false, quiet = false, print_ids = false;
  std::string kv_type = "f16", backend = "cpu", cuda_matmul = "own";
  int device = 0;
  tf::sample::sampling_params sp;
  sp.repetition_penalty = 1.0f;
  sp.logprobs = false;  // never printed
  app.add_option("MODEL", model_path, "GGUF file or HF folder (default: the default model)");
  app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("--tokens", tokens_arg, "prompt as comma-separated token ids (no tokenizer)");
  app.add_option("-n,--n-predict", n_predict, "tokens to generate")->check(CLI::Range(0, 1 << 20));
  app.add_flag("--chat", chat, "wrap the prompt in the model's chat template");
  app.add_option("--system", system, "system text for --chat");
  app.add_option("--temp", sp.temperature, "temperature (0: greedy)");
  app.add_option("--top-k", sp.top_k, "top-k (0: off)");
  app.add_option("--top-p", sp.top_p, "top-p (1: off)");
  app.add_option("--min-p", sp.min_p, "min-p (0: off)");
  app.add_option("--seed", sp.seed, "sampling seed");
  app.add_option("--repeat-penalty", sp.repetition_penalty, "repetition penalty (1: off)");
  app.add_option("--threads,-t", threads, "CPU threads")->check(CLI::Range(1, 1024));
  app.add_option("--context", context, "context size (default: prompt + n, at least 256)");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-generation tokens");
  app.add_flag("-q,--quiet", quiet, "print only the statistics line");
  app.add_flag("--print-ids", print_ids, "print token ids, not text");
  app.add_option("--load", load,
                 "read: copy the weights into huge-page memory (faster CPU decode); map: mmap them")
      ->check(CLI::IsMember({"read", "map"}));
  app.add_option("--kv-type", kv_type, "KV cache element type: f16 (as llama.cpp) or f32")
      ->check(CLI::IsMember({"f16", "f32"}));
  app.add_option("--backend", backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--device", device, "the CUDA device index for --backend cuda")
      ->check(CLI::Range(0, 1023));
  app.add_option("--cuda-matmul", cuda_matmul,
                 "--backend cuda matmuls: own (tf's kernel, faster decode) or cublaslt (cuBLASLt "
                 "for every weight, faster prefill)");
  CLI11_PARSE(app, argc, argv);

  try {
    tf::open_options o;
    o.threads = threads;
    o.load = load == "map" ? tf::model::load_mode::map : tf::model::load_mode::read;
    o.kv = kv_type == "f32" ? tf::kv_dtype::f32 : tf::kv_dtype::f16;
    o.context = 256;  // resized below, once the prompt's length is known
    o.device = device;
    o.cuda_matmul = tf::backend::parse_cuda_matmul(cuda_matmul);
    auto const path = tf::model::resolve_model_path(model_path);
    std::unique_ptr<tf::loaded_model> model;
#if defined(TF_WITH_CUDA)
    if (backend == "cuda") {
      o.load = tf::model::load_mode::map;  // the weights are copied to the device
      model = tf::open<tf::families::builtin, tf::backend::cuda>(path, o);
      fmt::print(
          stderr, "{}\n",
          tf::backend::cuda::summary(tf::backend::cuda_parts::query_device(device), o.cuda_matmul));
    }
#else
    if (backend == "cuda")
      throw tf::error(
          "tf-generate: --backend cuda: this binary was built without CUDA (TF_CUDA=OFF)");
#endif
    if (!model) model = tf::open(path, o);
    auto const* codec = model->codec();  // none in test fixtures: they run from --tokens
    std::vector<std::int32_t> ids;
    if (!tokens_arg.empty()) {
      ids = parse_ids(tokens_arg);
    } else {
      if (!codec) throw tf::error("tf-generate: the model has no tokenizer; pass --tokens");
      ids = chat ? chat_ids(*codec, prompt, system) : codec->tokens().encode(prompt, true, false);
    }
    if (ids.empty()) throw tf::error("tf-generate: the prompt is empty (give -p or --tokens)");
    int ctx = context > 0 ? context : std::max(256, static_cast<int>(ids.size()) + n_predict);
    ctx = static_cast<int>(std::min<std::int64_t>(ctx, model->trained_context()));
    if (static_cast<int>(ids.size()) + n_predict > ctx)
      throw tf::error("tf-generate: {} prompt tokens + {} to generate pass the context of {}",
                      ids.size(), n_predict, ctx);
    model->set_context(ctx);

    std::optional<tf::tokenizer::stream_decoder> dec;
    if (codec && !print_ids) dec.emplace(codec->tokens());
    if (!quiet) {
      if (dec)
        std::fputs(codec->decode(ids).c_str(), stdout);
      else
        for (auto id : ids) fmt::print("{} ", id);
      std::fflush(stdout);
    }
    auto const t0 = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> t1;  // the first token's time
    double prompt_s = 0.0;
    auto const out = model->generate(
        std::span<std::int32_t const>(ids), sp, n_predict,
        [&](tf::sample::sample_result const& r) {
          if (!t1) {
            t1 = std::chrono::steady_clock::now();
            prompt_s = std::chrono::duration<double>(*t1 - t0).count();
          }
          if (!quiet) {
            if (dec)
              std::fputs(dec->feed(r.token).c_str(), stdout);
            else
              fmt::print("{} ", r.token);
            std::fflush(stdout);
          }
          return true;
        },
        !ignore_eos);
    double const decode_s = t1 ? seconds_since(*t1) : 0.0;
    if (!t1) prompt_s = seconds_since(t0);
    if (!quiet) {
      if (dec) std::fputs(dec->flush().c_str(), stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
    }
    // Forwards after the first token: each emitted token but the last is fed back, and so is the
    // last when an end-of-generation token followed it.
    auto const emitted = static_cast<int>(out.tokens.size());
    int const decode_forwards =
        std::max(0, out.reason == tf::stop_reason::end_of_generation ? emitted : emitted - 1);
    fmt::print(stderr,
               "tf-generate: prompt {} tokens in {:.3f} s ({:.2f} tok/s); decode {} tokens in "
               "{:.3f} s ({:.2f} tok/s); threads {}\n",
               ids.size(), prompt_s, static_cast<double>(ids.size()) / prompt_s, decode_forwards,
               decode_s, decode_forwards > 0 ? decode_forwards / decode_s : 0.0, threads);
  } catch (std::exception const& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}
