// Tests kernels/cpu/dequant.hpp: bit-exact with gguf-py on fixture blocks and on the default model.
#include <kernels/cpu/dequant.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>
#include "../common/cannot_run.hpp"

namespace cpu = tf::kernels::cpu;
using tf::model::tensor_type;

namespace {

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> read_floats(const std::string& path) {
  auto bytes = read_bytes(path);
  REQUIRE(bytes.size() % 4 == 0);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

nlohmann::json index_json() {
  std::ifstream f(std::string(TF_FIXTURES_DIR) + "/quant/index.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

// Same bits, or both NaN (NaN payloads are not part of the contract).
bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

}  // namespace

TEST_CASE("dequantize_row is bit-exact with gguf-py on fixture blocks", "[dequant]") {
  auto idx = index_json();
  REQUIRE(idx["blocks"].size() == 14);
  for (auto const& e : idx["blocks"]) {
    const std::string name = e["type"];
    SECTION(name) {
      const auto t = static_cast<tensor_type>(e["id"].get<std::uint32_t>());
      const auto raw =
          read_bytes(std::string(TF_FIXTURES_DIR) + "/quant/" + e["raw"].get<std::string>());
      const auto want =
          read_floats(std::string(TF_FIXTURES_DIR) + "/quant/" + e["expected"].get<std::string>());
      const std::int64_t n = e["elements"];
      REQUIRE(static_cast<std::int64_t>(want.size()) == n);
      REQUIRE(raw.size() == tf::model::row_bytes(t, static_cast<std::uint64_t>(n)));
      // An odd offset checks that no alignment is assumed.
      std::vector<std::uint8_t> shifted(raw.size() + 1);
      std::memcpy(shifted.data() + 1, raw.data(), raw.size());
      std::vector<float> got(static_cast<std::size_t>(n), -12345.0f);
      cpu::dequantize_row(t, shifted.data() + 1, got.data(), n);
      int bad = 0;
      for (std::int64_t i = 0; i < n; ++i)
        if (!same(got[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)])) {
          if (bad++ < 5)
            UNSCOPED_INFO(name << " element " << i << ": got " << got[static_cast<std::size_t>(i)]
                               << " want " << want[static_cast<std::size_t>(i)]);
        }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("dequantize_row rejects partial blocks and types it cannot read", "[dequant]") {
  std::vector<std::uint8_t> buf(1024);
  std::vector<float> out(512);
  CHECK_THROWS_AS(cpu::dequantize_row(tensor_type::q4_k, buf.data(), out.data(), 100), tf::error);
  CHECK_THROWS_AS(cpu::dequantize_row(tensor_type::q8_0, buf.data(), out.data(), 33), tf::error);
  CHECK_THROWS_AS(cpu::dequantize_row(tensor_type::q8_0, buf.data(), out.data(), -32), tf::error);
  CHECK_THROWS_AS(cpu::dequantize_row(tensor_type::i32, buf.data(), out.data(), 4), tf::error);
  CHECK_THROWS_AS(cpu::dequantize_row(static_cast<tensor_type>(99), buf.data(), out.data(), 4),
                  tf::error);
  CHECK_NOTHROW(cpu::dequantize_row(tensor_type::q4_k, buf.data(), out.data(), 0));
}

TEST_CASE("dequantize_row is bit-exact with gguf-py on the default model's tensors", "[dequant]") {
  auto idx = index_json();
  const std::string path = idx["model"]["path"];
  if (!std::filesystem::exists(path)) {
    tf::test::cannot_run("the default model is absent: " + path);
    return;
  }
  const auto& tensors = idx["model"]["tensors"];
  REQUIRE(tensors.size() >= 4);
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  for (auto const& e : tensors) {
    const std::string name = e["name"];
    SECTION(name) {
      const auto t = static_cast<tensor_type>(e["id"].get<std::uint32_t>());
      const std::int64_t n = e["row_elements"].get<std::int64_t>() * e["rows"].get<std::int64_t>();
      std::vector<char> raw(tf::model::row_bytes(t, static_cast<std::uint64_t>(n)));
      f.seekg(e["offset"].get<std::int64_t>());
      f.read(raw.data(), static_cast<std::streamsize>(raw.size()));
      REQUIRE(f.good());
      std::vector<float> got(static_cast<std::size_t>(n));
      cpu::dequantize_row(t, raw.data(), got.data(), n);
      std::uint64_t h = 0xcbf29ce484222325ull;
      double sum = 0;
      for (float v : got) {
        const auto bits = std::bit_cast<std::uint32_t>(v);
        for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
        sum += v;
      }
      const auto& first = e["first_bits"];
      for (std::size_t i = 0; i < first.size(); ++i)
        CHECK(std::bit_cast<std::uint32_t>(got[i]) == first[i].get<std::uint32_t>());
      CHECK(fmt::format("{:016x}", h) == e["fnv1a64"].get<std::string>());
      CHECK(sum == Approx(e["sum"].get<double>()).epsilon(1e-9).margin(1e-9));
    }
  }
}
