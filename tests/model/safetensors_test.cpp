#include <tf/model/safetensors.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

namespace {

std::filesystem::path fixture(const char* name) {
  return std::filesystem::path(TF_FIXTURES_DIR) / "model" / name;
}

nlohmann::json expected() {
  std::ifstream in(fixture("hf_expected.json"));
  return nlohmann::json::parse(in);
}

float to_float(const tf::model::tensor_view& t, std::int64_t i) {
  using tf::model::tensor_type;
  if (t.type == tensor_type::f32) {
    float v;
    std::memcpy(&v, t.data + i * 4, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, t.data + i * 2, 2);
  if (t.type == tensor_type::bf16) {
    std::uint32_t bits = std::uint32_t{h} << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  // IEEE half to float, normal and subnormal numbers (the fixtures hold no inf/nan).
  std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
                       : std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -mag : mag;
}

void check_against_expected(const tf::model::hf_model& m) {
  auto ex = expected();
  CHECK(m.architecture() == ex["config"]["model_type"].get<std::string>());
  CHECK(m.config()["hidden_size"] == ex["config"]["hidden_size"]);
  REQUIRE(m.tensors().size() == ex["tensors"].size());
  for (auto const& [name, want] : ex["tensors"].items()) {
    INFO(name);
    auto t = m.find_tensor(name);
    REQUIRE(t);
    auto shape = want["shape"].get<std::vector<std::int64_t>>();
    std::vector<std::int64_t> reversed(shape.rbegin(), shape.rend());
    CHECK(t->dims == reversed);
    CHECK((want["dtype"] == "float32" ? tf::model::tensor_type::f32
                                      : tf::model::tensor_type::f16) == t->type);
    auto vals = want["values"].get<std::vector<float>>();
    REQUIRE(t->elements() == static_cast<std::int64_t>(vals.size()));
    CHECK(t->bytes == vals.size() * (t->type == tf::model::tensor_type::f32 ? 4u : 2u));
    for (std::size_t i = 0; i < vals.size(); ++i)
      CHECK(to_float(*t, static_cast<std::int64_t>(i)) == vals[i]);
  }
}

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    path = std::filesystem::temp_directory_path() /
           ("tf_model_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void write(const char* name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
  }
};

std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  std::string out(8, '\0');
  std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\x01');
}

}  // namespace

TEST_CASE("safetensors: a single-file folder reads back its tensors") {
  auto m = tf::model::hf_model::open(fixture("hf_single"));
  CHECK(m.shard_count() == 1);
  check_against_expected(m);
}

TEST_CASE("safetensors: a sharded folder follows its index") {
  auto m = tf::model::hf_model::open(fixture("hf_sharded"));
  CHECK(m.shard_count() == 2);
  check_against_expected(m);
  std::set<std::size_t> shards;
  for (std::size_t i = 0; i < m.tensors().size(); ++i) shards.insert(m.shard_of(i));
  CHECK(shards.size() == 2);
}

TEST_CASE("safetensors: BF16") {
  auto m = tf::model::hf_model::open(fixture("hf_bf16"));
  auto t = m.find_tensor("w");
  REQUIRE(t);
  CHECK(t->type == tf::model::tensor_type::bf16);
  CHECK(t->dims == std::vector<std::int64_t>{4, 2});
  auto want = expected()["bf16"].get<std::vector<float>>();
  REQUIRE(t->elements() == static_cast<std::int64_t>(want.size()));
  for (std::size_t i = 0; i < want.size(); ++i)
    CHECK(to_float(*t, static_cast<std::int64_t>(i)) == want[i]);
}

TEST_CASE("safetensors: bad folders and headers are refused") {
  using tf::model::hf_model;
  CHECK_THROWS_AS(hf_model::open(fixture("no-such-folder")), tf::error);
  auto msg = [](const temp_dir& d) -> std::string {
    try {
      hf_model::open(d.path);
    } catch (const tf::error& e) {
      return e.what();
    }
    return "";
  };
  {
    temp_dir d;
    d.write("model.safetensors", safetensors_bytes("{}", 0));
    CHECK(msg(d).find("config.json") != std::string::npos);
  }
  auto with = [&](const std::string& header, std::size_t data) {
    temp_dir d;
    d.write("config.json", R"({"model_type": "x"})");
    d.write("model.safetensors", safetensors_bytes(header, data));
    return msg(d);
  };
  CHECK(with(R"({"a": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})", 16)
            .find("dtype I64") != std::string::npos);
  CHECK(
      with(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 16]}})", 8).find("inside") !=
      std::string::npos);
  CHECK(with(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8)
            .find("expected 12 bytes") != std::string::npos);
  CHECK(with(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
             R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
             12)
            .find("overlaps") != std::string::npos);
  CHECK(with(R"({"a": 1})", 0).find("expected an object") != std::string::npos);
  CHECK(with("{not json", 0).find("JSON header") != std::string::npos);
  {
    temp_dir d;
    d.write("config.json", "{}");
    std::string b(8, '\0');
    std::uint64_t n = 1000;
    std::memcpy(b.data(), &n, 8);
    d.write("model.safetensors", b + "{}");
    CHECK(msg(d).find("header length") != std::string::npos);
  }
  {
    temp_dir d;
    d.write("config.json", "{}");
    d.write("model.safetensors.index.json", R"({"weight_map": {"a": "missing.safetensors"}})");
    CHECK(msg(d).find("missing.safetensors") != std::string::npos);
  }
}

TEST_CASE("safetensors: random byte flips throw tf::error or parse, never crash") {
  std::ifstream in(fixture("hf_single") / "model.safetensors", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t header = 0;
  std::memcpy(&header, s.data(), 8);
  std::mt19937_64 rng(7);
  std::size_t ok = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<std::byte> b(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k)
      b[rng() % (8 + header)] = static_cast<std::byte>(rng() & 0xff);
    auto bytes = tf::model::detail::mapped_bytes::own(std::move(b));
    std::vector<tf::model::tensor_view> out;
    try {
      tf::model::detail::parse_safetensors(bytes, "fuzz", out);
      for (auto const& t : out) REQUIRE(t.offset + t.bytes <= bytes.size());
      ++ok;
    } catch (const tf::error&) {
      ++refused;
    }
  }
  CHECK(ok + refused == 3000);
  CHECK(refused > 0);
}
