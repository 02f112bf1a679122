// tf-generate: streams a continuation of a prompt on the CPU (any family in
// families/cpu_entries.hpp) and prints prompt and decode tokens/s. With no MODEL it uses the
// default model.
#include <families/common/one_stream.hpp>
#include <families/cpu_entries.hpp>
#include <tf/error.hpp>
#include <tf/model/default_model.hpp>
#include <tf/model/model_file.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/tokenizer/chat_template.hpp>
#include <tf/tokenizer/from_gguf.hpp>
#include <tf/tokenizer/stream_decoder.hpp>

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

// The chat prompt for one user turn (and an optional system message), through the GGUF's chat
// template or the built-in Gemma 3 one; returns ids with BOS added once.
std::vector<std::int32_t> chat_ids(tf::tokenizer::tokenizer const& tok,
                                   tf::model::gguf_file const& g, std::string const& user,
                                   std::string const& system) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  auto const& v = tok.vocab();
  std::string bos = v.bos >= 0 && static_cast<std::size_t>(v.bos) < v.size() ? v.tokens[v.bos] : "";
  std::string eos = v.eos >= 0 && static_cast<std::size_t>(v.eos) < v.size() ? v.tokens[v.eos] : "";
  nlohmann::json opts = {{"add_generation_prompt", true}, {"bos_token", bos}, {"eos_token", eos}};
  std::string tmpl(g.get_string("tokenizer.chat_template").value_or(""));
  // Only Gemma 3 has a built-in template; other families' turns differ.
  if (tmpl.empty() && g.architecture() == "gemma3")
    tmpl = tf::tokenizer::chat_template_or_fallback("");
  if (tmpl.empty())
    throw tf::error("tf: the model has no tokenizer.chat_template: drop --chat for a plain prompt");
  std::string text = tf::tokenizer::render_chat(tmpl, nlohmann::json(messages), opts);
  bool const has_bos = !bos.empty() && text.starts_with(bos);
  return tok.encode(text, !has_bos, true);
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
  CLI::App app{"tf-generate: a continuation of a prompt, streamed, on the CPU"};
  std::optional<std::string> model_path;
  std::string prompt, system, tokens_arg;
  int n_predict = 64, threads = 1, context = 0;
  std::string load = "read";
  bool chat = false, ignore_eos = false, quiet = false;
  std::string kv_type = "f16";
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
  app.add_option("--load", load,
                 "read: copy the weights into huge-page memory (faster CPU decode); map: mmap them")
      ->check(CLI::IsMember({"read", "map"}));
  app.add_option("--kv-type", kv_type, "KV cache element type: f16 (as llama.cpp) or f32")
      ->check(CLI::IsMember({"f16", "f32"}));
  CLI11_PARSE(app, argc, argv);

  try {
    auto path = tf::model::resolve_model_path(model_path);
    auto file = tf::model::model_file::open(
        path, load == "map" ? tf::model::load_mode::map : tf::model::load_mode::read);

    std::optional<tf::tokenizer::tokenizer> tok;
    // A file without a tokenizer (test fixtures) still runs from --tokens.
    if (file.gguf() && file.gguf()->get_string("tokenizer.ggml.model"))
      tok.emplace(tf::tokenizer::load_tokenizer(*file.gguf()));
    std::vector<std::int32_t> ids;
    if (!tokens_arg.empty()) {
      ids = parse_ids(tokens_arg);
    } else {
      if (!tok)
        throw tf::error("tf-generate: {} has no GGUF tokenizer; pass --tokens", path.string());
      ids = chat ? chat_ids(*tok, *file.gguf(), prompt, system) : tok->encode(prompt, true, false);
    }
    if (ids.empty()) throw tf::error("tf-generate: the prompt is empty (give -p or --tokens)");

    int ctx = context > 0 ? context : std::max(256, static_cast<int>(ids.size()) + n_predict);
    auto const arch = file.architecture();
    tf::families::dispatch_cpu(arch, [&](auto entry_type) {
      using entry = typename decltype(entry_type)::type;
      ctx = static_cast<int>(std::min<std::int64_t>(ctx, entry::context_length(file)));
    });
    if (static_cast<int>(ids.size()) + n_predict > ctx)
      throw tf::error("tf-generate: {} prompt tokens + {} to generate pass the context of {}",
                      ids.size(), n_predict, ctx);
    auto const kv = tf::families::one_stream_shape(
        ctx, 256, kv_type == "f32" ? tf::families::kv_dtype::f32 : tf::families::kv_dtype::f16);
    tf::families::dispatch_cpu(arch, [&](auto entry_type) {
      using entry = typename decltype(entry_type)::type;
      tf::families::one_stream<typename entry::forward_type> gen(entry::make(file, kv, threads), kv,
                                                                 ctx);
      tf::sample::sampler sampler(sp);

      std::optional<tf::tokenizer::stream_decoder> dec;
      if (tok) dec.emplace(*tok);
      if (!quiet) {
        if (tok)
          std::fputs(tok->decode(ids).c_str(), stdout);
        else
          for (auto id : ids) fmt::print("{} ", id);
        std::fflush(stdout);
      }

      auto t0 = std::chrono::steady_clock::now();
      auto logits = gen.feed(ids);
      double const prompt_s = seconds_since(t0);

      std::vector<std::int32_t> history(ids);
      int generated = 0;
      auto t1 = std::chrono::steady_clock::now();
      for (; generated < n_predict; ++generated) {
        std::size_t const from = history.size() > 64 ? history.size() - 64 : 0;
        auto r = sampler.sample(logits, std::span(history).subspan(from));
        history.push_back(r.token);
        if (!quiet) {
          if (dec)
            std::fputs(dec->feed(r.token).c_str(), stdout);
          else
            fmt::print("{} ", r.token);
          std::fflush(stdout);
        }
        if (!ignore_eos && tok && tok->is_eog(r.token)) {
          ++generated;
          break;
        }
        if (generated + 1 < n_predict) logits = gen.feed({&r.token, 1});
      }
      double const decode_s = seconds_since(t1);
      if (!quiet) {
        if (dec) std::fputs(dec->flush().c_str(), stdout);
        std::fputs("\n", stdout);
        std::fflush(stdout);
      }
      // Decode time covers generated - 1 forwards (the first token comes from the prompt's logits).
      int const decode_forwards = std::max(0, generated - 1);
      fmt::print(stderr,
                 "tf-generate: prompt {} tokens in {:.3f} s ({:.2f} tok/s); decode {} tokens in "
                 "{:.3f} s ({:.2f} tok/s); threads {}\n",
                 ids.size(), prompt_s, static_cast<double>(ids.size()) / prompt_s, decode_forwards,
                 decode_s, decode_forwards > 0 ? decode_forwards / decode_s : 0.0, threads);
    });
  } catch (std::exception const& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}
