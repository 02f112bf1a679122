// tf-perplexity: llama-perplexity's measure of a model on a text file (side-by-side windows
// scoring their second half, or strided windows), its windows run as a batch of streams.
#include <tf/engine.hpp>
#include <tf/engine/perplexity.hpp>
#include <tf/error.hpp>
#include <tf/model/default_model.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{
      "tf-perplexity: a model's perplexity on a text file, as llama-perplexity measures it"};
  std::optional<std::string> model_path;
  std::string file;
  tf::perplexity_options po;
  int threads = 1;
  std::string load = "read";
  app.add_option("MODEL", model_path, "GGUF file or HF folder (default: the default model)");
  app.add_option("-f,--file", file, "the text to score")->required()->check(CLI::ExistingFile);
  app.add_option("-c,--ctx-size", po.context, "tokens per window")->check(CLI::Range(2, 1 << 20));
  app.add_option("--ppl-stride", po.stride,
                 "0: side-by-side windows scoring their second half; > 0: windows of "
                 "CTX + STRIDE/2 tokens (rounded up to a multiple of 256) every STRIDE tokens, "
                 "each scoring its last STRIDE")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--chunks", po.chunks, "windows to score at most (-1: all)");
  app.add_option("--parallel", po.streams, "windows run as one batch")->check(CLI::Range(1, 1024));
  app.add_option("--threads,-t", threads, "CPU threads")->check(CLI::Range(1, 1024));
  app.add_option("--load", load, "read: copy the weights into memory; map: mmap them")
      ->check(CLI::IsMember({"read", "map"}));
  CLI11_PARSE(app, argc, argv);

  try {
    tf::open_options o;
    o.threads = threads;
    o.load = load == "map" ? tf::model::load_mode::map : tf::model::load_mode::read;
    o.context = 256;  // replaced by the windows' store
    auto model = tf::open(tf::model::resolve_model_path(model_path), o);
    auto const* codec = model->codec();
    if (!codec) throw tf::error("tf-perplexity: the model has no tokenizer");
    std::ifstream in(file, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // As llama.cpp's -f: one trailing newline is not part of the text.
    if (!text.empty() && text.back() == '\n') text.pop_back();
    // As llama-perplexity: the whole text with the vocabulary's BOS, special texts not parsed.
    auto const ids = codec->tokens().encode(text, true, false);
    // As llama-perplexity: a strided window is the context and half the stride, rounded up to
    // a multiple of 256 (llama.cpp pads every context so).
    if (po.stride > 0) po.context = (po.context + po.stride / 2 + 255) / 256 * 256;
    auto const& vocab = codec->tokens().vocab();
    if (vocab.add_bos) po.bos = vocab.bos;
    fmt::print(stderr,
               "tf-perplexity: {} tokens, context {}, stride {}, {} windows at once, {} "
               "threads\n",
               ids.size(), po.context, po.stride, po.streams, threads);
    auto const t0 = std::chrono::steady_clock::now();
    auto const r = tf::perplexity(*model, ids, po, [](std::int32_t i, double running) {
      fmt::print("[{}]{:.4f},", i, running);
      std::fflush(stdout);
    });
    double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", r.ppl, r.ppl_error);
    fmt::print("tf-perplexity: {} windows, {} scored tokens, nll {:.17g}\n", r.windows, r.count,
               r.nll);
    auto const run = static_cast<double>(r.windows) * po.context;
    fmt::print(stderr, "tf-perplexity: {:.3f} s, {:.2f} window tokens/s\n", s, run / s);
  } catch (std::exception const& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
  return 0;
}
