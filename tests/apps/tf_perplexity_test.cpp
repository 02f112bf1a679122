// tf-perplexity, the binary, on the default model and a licence text, against llama-perplexity on
// the same file, context and stride (fixtures/eval/llama_perplexity.json, made by
// fixtures/scripts/make_perplexity_golden.py), for both window layouts: within 0.5% of its default
// batched path, and every running figure of its one-token path to the printed digits; the same
// bits at 1 and 2 threads and any number of windows at once; a text too short refused clearly.
#include <tests/common/cannot_run.hpp>
#include <tests/common/run_command.hpp>
#include <tf/model/default_model.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

tf::test::run_result run(std::string const& args) {
  return tf::test::run_command((fs::path(TF_BINARY_DIR) / "apps" / "tf-perplexity").string() + " " +
                               args);
}

struct figures {
  double ppl = 0.0;
  std::string nll;  // as printed, all 17 digits
};

figures parse(std::string const& out) {
  std::smatch m;
  figures f;
  REQUIRE(std::regex_search(out, m, std::regex(R"(Final estimate: PPL = ([0-9.]+))")));
  f.ppl = std::stod(m[1]);
  REQUIRE(std::regex_search(out, m, std::regex(R"(nll ([0-9.e+-]+))")));
  f.nll = m[1];
  return f;
}

}  // namespace

TEST_CASE("tf-perplexity: llama-perplexity's figures, equal at any thread count and batch") {
  auto const model = tf::model::resolve_model_path(std::nullopt);
  if (!fs::exists(model)) {
    tf::test::cannot_run("the default model is absent: " + model.string());
    return;
  }
  std::ifstream in(TF_FIXTURES_DIR "/eval/llama_perplexity.json");
  REQUIRE(in);
  auto const golden = nlohmann::json::parse(in);
  std::string const text = TF_FIXTURES_DIR "/eval/apache-2.0.txt";
  // The runs come in pairs per measure: llama-perplexity's default path, then one token per
  // decode without flash attention.
  auto const& runs = golden["runs"];
  REQUIRE(runs.size() == 4);
  for (std::size_t k = 0; k < runs.size(); k += 2) {
    auto const& batched = runs[k];
    auto const& one_token = runs[k + 1];
    REQUIRE(batched["path"] == "default");
    REQUIRE(one_token["path"] == "one_token");
    auto const args = model.string() + " -f " + text + " -c " +
                      std::to_string(batched["context"].get<int>()) + " --ppl-stride " +
                      std::to_string(batched["stride"].get<int>());
    INFO(batched.dump());
    auto const two = run(args + " -t 2 --parallel 3");
    INFO(two.out);
    REQUIRE(two.status == 0);
    auto const b = parse(two.out);
    // Within 0.5% of llama.cpp's batched windows (its own kernels for a batch).
    auto const want = batched["ppl"].get<double>();
    CHECK(std::abs(b.ppl - want) / want < 0.005);
    // Every running figure of llama.cpp's one-token path, to its printed digits.
    std::vector<double> running;
    std::regex const item(R"(\[(\d+)\]([0-9.]+),)");
    for (std::sregex_iterator it(two.out.begin(), two.out.end(), item), end; it != end; ++it)
      running.push_back(std::stod((*it)[2]));
    REQUIRE(running.size() == one_token["running"].size());
    for (std::size_t i = 0; i < running.size(); ++i) {
      INFO("window " << i + 1);
      CHECK(std::abs(running[i] - std::stod(one_token["running"][i].get<std::string>())) < 1.5e-4);
    }
    if (k == 0) {
      // One thread, one window at a time: the same bits.
      auto const one = run(args + " -t 1 --parallel 1");
      INFO(one.out);
      REQUIRE(one.status == 0);
      auto const a = parse(one.out);
      CHECK(a.nll == b.nll);
      CHECK(a.ppl == b.ppl);
    }
  }
  auto const short_text = run(model.string() + " -f " + text + " -c 4096");
  CHECK(short_text.status != 0);
  CHECK(short_text.out.find("needs at least 8192 tokens") != std::string::npos);
}
