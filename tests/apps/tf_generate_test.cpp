// tf-generate, the binary: over every tiny fixture (GGUF F32 and HF safetensors) of every family,
// dense, MoE and hybrid, its greedy continuation of a fixture prompt is transformers' (the
// fixture's expected.json), printed as token ids; a bad argument fails with a clear message.
// The hybrid families (Qwen3.5, Nemotron-H) run here as serve runs them (live_hybrid_test).
#include <tests/common/cannot_run.hpp>
#include <tests/common/run_command.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

fs::path binary() {
  return fs::path(TF_BINARY_DIR) / "apps" / "tf-generate";
}

tf::test::run_result run(std::string const& args) {
  return tf::test::run_command(binary().string() + " " + args);
}

std::string join(std::vector<std::int32_t> const& ids, char const* sep) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

TEST_CASE("tf-generate continues every tiny fixture greedily as transformers does") {
  if (!fs::exists(binary())) {
    tf::test::cannot_run("tf-generate is not built: " + binary().string());
    return;
  }
  fs::path const root = TF_FIXTURES_DIR;
  std::vector<std::string> const models{"gemma/tiny/tiny-f32.gguf",
                                        "gemma/tiny",
                                        "qwen/tiny/tiny-f32.gguf",
                                        "qwen/tiny_moe/tiny-f32.gguf",
                                        "glm/tiny4/tiny-f32.gguf",
                                        "glm/tiny45/tiny-f32.gguf",
                                        "qwen/tiny35/tiny-f32.gguf",
                                        "qwen/tiny35",
                                        "qwen/tiny35_moe/tiny-f32.gguf",
                                        "nemotron/tiny_h/tiny-f32.gguf",
                                        "nemotron/tiny_h",
                                        "nemotron/tiny_h_moe/tiny-f32.gguf",
                                        "nemotron/tiny_h_latent/tiny-f32.gguf",
                                        "qwen/tiny3next/tiny-f32.gguf",
                                        "qwen/tiny3next",
                                        "gemma/tiny4_e",
                                        "gemma/tiny4_e/tiny-f32.gguf",
                                        "gemma/tiny4_moe"};
  for (auto const& rel : models) {
    auto const path = root / rel;
    INFO(path.string());
    REQUIRE(fs::exists(path));
    auto const dir = fs::is_directory(path) ? path : path.parent_path();
    nlohmann::json expected;
    std::ifstream(dir / "expected.json") >> expected;
    auto const& c = expected.at("prompts").at(0);
    auto const prompt = c.at("prompt").get<std::vector<std::int32_t>>();
    auto const greedy = c.at("greedy").get<std::vector<std::int32_t>>();
    auto const r =
        run(path.string() + " --tokens " + join(prompt, ",") + " -n " +
            std::to_string(greedy.size()) + " --temp 0 --ignore-eos --print-ids --threads 2");
    INFO(r.out);
    REQUIRE(r.status == 0);
    // The prompt's ids, then the continuation's, each followed by a space.
    CHECK(r.out.find(join(prompt, " ") + " " + join(greedy, " ") + " \n") != std::string::npos);
    CHECK(r.out.find("decode " + std::to_string(greedy.size() - 1) + " tokens") !=
          std::string::npos);
  }
}

TEST_CASE("tf-generate refuses bad arguments with a clear message") {
  if (!fs::exists(binary())) {
    tf::test::cannot_run("tf-generate is not built: " + binary().string());
    return;
  }
  auto const model = (fs::path(TF_FIXTURES_DIR) / "qwen/tiny35/tiny-f32.gguf").string();
  auto r = run(model + " --tokens 1,x,3 -n 2");
  CHECK(r.status != 0);
  CHECK(r.out.find("--tokens wants comma-separated ids") != std::string::npos);
  r = run(model + " --tokens 1,2 -n 100000000");
  CHECK(r.status != 0);
  r = run(model + " --tokens 99999999 -n 2");
  CHECK(r.status != 0);
  CHECK(r.out.find("outside the vocab") != std::string::npos);
  // Without CUDA in the build, or without a device, --backend cuda says which.
  if (r = run(model + " --tokens 1,2 -n 2 --backend cuda"); r.status != 0)
    CHECK(r.out.find("CUDA") != std::string::npos);
}
