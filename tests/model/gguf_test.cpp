#include <tf/model/gguf.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

namespace {

std::string fixture(const char* name) {
  return std::string(TF_FIXTURES_DIR) + "/model/" + name;
}

std::vector<std::byte> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

nlohmann::json expected() {
  std::ifstream in(fixture("tiny.json"));
  return nlohmann::json::parse(in);
}

template <class T>
void poke(std::vector<std::byte>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

}  // namespace

using tf::model::gguf_file;
using tf::model::gguf_type;

TEST_CASE("gguf: metadata of every type reads back exactly") {
  auto f = gguf_file::open(fixture("tiny.gguf"));
  auto ex = expected();
  CHECK(f.version() == 3);
  CHECK(f.architecture() == ex["architecture"].get<std::string>());
  CHECK(f.get_string("general.name") == std::optional<std::string_view>("tiny test model"));
  auto const& m = ex["metadata"];
  for (auto const& name : {"test.u8", "test.i8", "test.u16", "test.i16", "test.u32", "test.i32",
                           "test.u64", "test.i64"}) {
    INFO(name);
    REQUIRE(f.get_int(name).has_value());
    CHECK(*f.get_int(name) == m[name]["value"].get<std::int64_t>());
  }
  CHECK(f.find_kv("test.u8")->type == gguf_type::u8);
  CHECK(f.find_kv("test.i64")->type == gguf_type::i64);
  CHECK(f.find_kv("test.f64")->type == gguf_type::f64);
  CHECK(*f.get_float("test.f32") == m["test.f32"]["value"].get<double>());
  CHECK(*f.get_float("test.f64") == m["test.f64"]["value"].get<double>());
  CHECK(*f.get_float("test.i32") == m["test.i32"]["value"].get<double>());
  CHECK(*f.get_bool("test.bool_true") == true);
  CHECK(*f.get_bool("test.bool_false") == false);
  CHECK(*f.get_string("test.string") == m["test.string"]["value"].get<std::string>());
  CHECK(*f.get_string("test.empty_string") == "");
  auto ints = f.get_int_array("test.arr_i32");
  CHECK(ints == m["test.arr_i32"]["value"].get<std::vector<std::int64_t>>());
  auto floats = f.get_float_array("test.arr_f32");
  CHECK(floats == m["test.arr_f32"]["value"].get<std::vector<float>>());
  auto strs = f.get_string_array("test.arr_str");
  auto want = m["test.arr_str"]["value"].get<std::vector<std::string>>();
  REQUIRE(strs.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(strs[i] == want[i]);
  auto nested = f.find_kv("test.arr_nested");
  REQUIRE(nested);
  CHECK(nested->type == gguf_type::array);
  CHECK(nested->elem_type == gguf_type::array);
  CHECK(nested->count == m["test.arr_nested"]["value"].size());
  CHECK(f.render(*nested).find("array x 2") != std::string::npos);

  CHECK_FALSE(f.has("test.absent"));
  CHECK_FALSE(f.get_int("test.absent").has_value());
  CHECK(f.get_string_array("test.absent").empty());
  CHECK_THROWS_AS(f.get_int("test.string"), tf::error);
  CHECK_THROWS_AS(f.get_string("test.u8"), tf::error);
  CHECK_THROWS_AS(f.get_string_array("test.arr_i32"), tf::error);
  CHECK_THROWS_AS(f.get_bool("test.u8"), tf::error);
  // The metadata count is the test keys plus general.architecture and general.name.
  CHECK(f.metadata().size() == m.size() + 2);
  for (auto const& kv : f.metadata()) CHECK_FALSE(f.render(kv).empty());
}

TEST_CASE("gguf: tensor infos match what the writer wrote") {
  auto ex = expected();
  for (auto [file, key] :
       {std::pair{"tiny.gguf", "tensors"}, {"tiny_align64.gguf", "tensors_align64"}}) {
    INFO(file);
    auto f = gguf_file::open(fixture(file));
    auto const& want = ex[key];
    REQUIRE(f.tensors().size() == want.size());
    CHECK(f.alignment() == (std::string(file) == "tiny.gguf" ? 32u : 64u));
    CHECK(f.data_offset() % f.alignment() == 0);
    for (auto const& w : want) {
      auto name = w["name"].get<std::string>();
      INFO(name);
      auto t = f.find_tensor(name);
      REQUIRE(t);
      CHECK(static_cast<int>(t->type) == w["type"].get<int>());
      CHECK(tf::model::traits_of(t->type).name == w["type_name"].get<std::string>());
      CHECK(t->dims == w["dims"].get<std::vector<std::int64_t>>());
      CHECK(t->bytes == w["bytes"].get<std::uint64_t>());
      CHECK(t->offset == w["offset"].get<std::uint64_t>());
      CHECK((t->offset - f.data_offset()) % f.alignment() == 0);
      CHECK(t->rows() * t->dims[0] == t->elements());
      CHECK(t->offset + t->bytes <= f.file_size());
    }
  }
  auto f = gguf_file::open(fixture("tiny.gguf"));
  auto t = f.find_tensor("t.f32");
  REQUIRE(t);
  auto vals = ex["values"]["t.f32"]["source"].get<std::vector<float>>();
  REQUIRE(t->bytes == vals.size() * 4);
  std::vector<float> got(vals.size());
  std::memcpy(got.data(), t->data, t->bytes);
  CHECK(got == vals);
  CHECK(f.find_tensor("t.absent") == nullptr);
}

TEST_CASE("gguf: from_bytes equals open, and v2 reads like v3") {
  auto bytes = slurp(fixture("tiny.gguf"));
  auto a = gguf_file::open(fixture("tiny.gguf"));
  auto b = gguf_file::from_bytes(bytes);
  REQUIRE(a.tensors().size() == b.tensors().size());
  CHECK(std::memcmp(a.tensors()[0].data, b.tensors()[0].data, a.tensors()[0].bytes) == 0);
  poke<std::uint32_t>(bytes, 4, 2);
  auto v2 = gguf_file::from_bytes(bytes);
  CHECK(v2.version() == 2);
  CHECK(v2.tensors().size() == a.tensors().size());
  // Moving keeps views valid.
  auto moved = std::move(v2);
  CHECK(moved.architecture() == "tinyarch");
  CHECK(moved.find_tensor("t.q8_0") != nullptr);
}

TEST_CASE("gguf: a file read into memory equals the mapped one, and read refuses what map does") {
  auto mapped = gguf_file::open(fixture("tiny.gguf"), tf::model::load_mode::map);
  auto read = gguf_file::open(fixture("tiny.gguf"), tf::model::load_mode::read);
  REQUIRE(read.tensors().size() == mapped.tensors().size());
  for (std::size_t i = 0; i < read.tensors().size(); ++i) {
    auto const& r = read.tensors()[i];
    auto const& m = mapped.tensors()[i];
    CHECK(r.name == m.name);
    REQUIRE(r.bytes == m.bytes);
    CHECK(std::memcmp(r.data, m.data, r.bytes) == 0);
    CHECK(r.data != m.data);
  }
  // The copy is 2 MiB aligned, so the file's own tensor alignment carries over.
  CHECK(reinterpret_cast<std::uintptr_t>(read.tensors()[0].data) % 32 == 0);
  auto moved = std::move(read);
  CHECK(moved.find_tensor("t.q8_0") != nullptr);
  CHECK_THROWS_AS(gguf_file::open(fixture("no-such-file.gguf"), tf::model::load_mode::read),
                  tf::error);
  CHECK_THROWS_AS(gguf_file::open(TF_FIXTURES_DIR, tf::model::load_mode::read), tf::error);
}

TEST_CASE("gguf: rewrite_tensor changes only a copy in memory, once per tensor") {
  auto mapped = gguf_file::open(fixture("tiny.gguf"), tf::model::load_mode::map);
  auto read = gguf_file::open(fixture("tiny.gguf"), tf::model::load_mode::read);
  auto const& tm = *mapped.find_tensor("t.q8_0");
  auto const& tr = *read.find_tensor("t.q8_0");
  auto flip = [](std::uint64_t n) {
    return [n](std::byte* p) {
      for (std::uint64_t i = 0; i < n; ++i) p[i] = ~p[i];
    };
  };
  CHECK_FALSE(mapped.rewrite_tensor(tm, "flipped", flip(tm.bytes)));
  CHECK(mapped.layout_of(tm).empty());
  REQUIRE(read.rewrite_tensor(tr, "flipped", flip(tr.bytes)));
  CHECK(read.layout_of(tr) == "flipped");
  for (std::uint64_t i = 0; i < tr.bytes; ++i) REQUIRE(tr.data[i] == ~tm.data[i]);
  // Once in a layout, the same tag is a no-op and another is refused.
  CHECK(read.rewrite_tensor(tr, "flipped", flip(tr.bytes)));
  CHECK(tr.data[0] == ~tm.data[0]);
  CHECK_THROWS_AS(read.rewrite_tensor(tr, "other", flip(1)), tf::error);
  CHECK_THROWS_AS(read.rewrite_tensor(tm, "flipped", flip(1)), tf::error);  // not read's tensor
  // The other tensors keep the file's bytes; the layout moves with the file.
  for (auto const& t : read.tensors())
    if (t.name != "t.q8_0")
      CHECK(std::memcmp(t.data, mapped.find_tensor(t.name)->data, t.bytes) == 0);
  auto moved = std::move(read);
  CHECK(moved.layout_of(*moved.find_tensor("t.q8_0")) == "flipped");
  auto owned = gguf_file::from_bytes(slurp(fixture("tiny.gguf")));
  CHECK(owned.rewrite_tensor(*owned.find_tensor("t.q8_0"), "flipped", flip(1)));
}

namespace {
std::string message_of(std::vector<std::byte> bytes) {
  try {
    gguf_file::from_bytes(std::move(bytes));
  } catch (const tf::error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("gguf: corrupt headers are refused with the offset and what was expected") {
  auto good = slurp(fixture("tiny.gguf"));
  {
    auto b = good;
    b[0] = std::byte{'X'};
    auto msg = message_of(b);
    CHECK(msg.find("magic") != std::string::npos);
    CHECK(msg.find("at byte 0") != std::string::npos);
  }
  {
    auto b = good;
    poke<std::uint32_t>(b, 4, 4);
    CHECK(message_of(b).find("version 2 or 3") != std::string::npos);
    poke<std::uint32_t>(b, 4, 1);
    CHECK(message_of(b).find("version 2 or 3") != std::string::npos);
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, 8, std::uint64_t{1} << 60);
    auto msg = message_of(b);
    CHECK(msg.find("tensor count") != std::string::npos);
    CHECK(msg.find("at byte 8") != std::string::npos);
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, 16, 0xffffffffffffull);
    CHECK(message_of(b).find("metadata count") != std::string::npos);
  }
  CHECK(message_of({}).find("magic") != std::string::npos);
  CHECK_THROWS_AS(gguf_file::open(fixture("no-such-file.gguf")), tf::error);
}

namespace {
// Finds the byte offset of a tensor's info record by its name (u64 length then the name).
std::size_t find_info(const std::vector<std::byte>& b, std::string_view name) {
  std::string needle(8, '\0');
  std::uint64_t n = name.size();
  std::memcpy(needle.data(), &n, 8);
  needle += name;
  std::string_view hay(reinterpret_cast<const char*>(b.data()), b.size());
  auto at = hay.find(needle);
  REQUIRE(at != std::string_view::npos);
  return at;
}
}  // namespace

TEST_CASE("gguf: bad tensor infos are refused") {
  auto good = slurp(fixture("tiny.gguf"));
  auto f = gguf_file::from_bytes(good);
  // Layout of the info of "t.f32" (2 dims): name, n_dims u32, dims u64 x2, type u32, offset u64.
  auto info = find_info(good, "t.f32");
  auto n_dims_at = info + 8 + 5;
  auto dims_at = n_dims_at + 4;
  auto type_at = dims_at + 16;
  auto off_at = type_at + 4;
  REQUIRE(f.find_tensor("t.f32")->dims.size() == 2);
  {
    auto b = good;
    poke<std::uint32_t>(b, type_at, 99);
    auto msg = message_of(b);
    CHECK(msg.find("type number 99") != std::string::npos);
    CHECK(msg.find(fmt::format("at byte {}", type_at)) != std::string::npos);
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, off_at, std::uint64_t{1} << 40);
    CHECK(message_of(b).find("inside the") != std::string::npos);
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, off_at, 4);
    CHECK(message_of(b).find("multiple of 32") != std::string::npos);
  }
  {
    auto b = good;
    auto other = f.find_tensor("t.f16");
    poke<std::uint64_t>(b, off_at, other->offset - f.data_offset());
    CHECK(message_of(b).find("overlap") != std::string::npos);
  }
  {
    auto b = good;
    poke<std::uint64_t>(b, dims_at, std::uint64_t{1} << 62);
    poke<std::uint64_t>(b, dims_at + 8, std::uint64_t{1} << 62);
    CHECK(message_of(b).find("fit in int64") != std::string::npos);
  }
  {
    auto b = good;
    poke<std::uint32_t>(b, n_dims_at, 9);
    CHECK(message_of(b).find("dimensions") != std::string::npos);
  }
  {
    auto q = find_info(good, "t.q8_0");
    auto b = good;
    poke<std::uint64_t>(b, q + 8 + 6 + 4, 48);  // row length 48 is not a multiple of 32
    CHECK(message_of(b).find("multiple of 32") != std::string::npos);
  }
}

TEST_CASE("gguf: every truncation throws tf::error") {
  auto good = slurp(fixture("tiny.gguf"));
  auto f = gguf_file::from_bytes(good);
  std::uint64_t end = 0;
  for (auto const& t : f.tensors()) end = std::max(end, t.offset + t.bytes);
  std::size_t thrown = 0;
  for (std::size_t n = 0; n < good.size(); ++n) {
    std::vector<std::byte> prefix(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    try {
      gguf_file::from_bytes(std::move(prefix));
      CHECK(n >= end);  // only trailing padding may be cut
    } catch (const tf::error&) {
      ++thrown;
    }
  }
  CHECK(thrown == end);
}

TEST_CASE("gguf: random byte flips throw tf::error or parse, never crash") {
  auto good = slurp(fixture("tiny.gguf"));
  std::mt19937_64 rng(42);
  std::size_t ok = 0, refused = 0;
  for (int i = 0; i < 6000; ++i) {
    auto b = good;
    // Flip mostly in the header and infos, where the structure is.
    auto flips = 1 + rng() % 4;
    for (std::size_t k = 0; k < flips; ++k) {
      auto at = (i % 2 ? rng() % b.size() : rng() % std::min<std::size_t>(b.size(), 1600));
      b[at] = static_cast<std::byte>(rng() & 0xff);
    }
    try {
      auto g = gguf_file::from_bytes(std::move(b));
      for (auto const& kv : g.metadata()) (void)g.render(kv);
      for (auto const& t : g.tensors()) REQUIRE(t.offset + t.bytes <= g.file_size());
      ++ok;
    } catch (const tf::error&) {
      ++refused;
    }
  }
  CHECK(ok + refused == 6000);
  CHECK(refused > 0);
}

TEST_CASE("gguf: absurd string and array lengths, bad alignment") {
  auto good = slurp(fixture("tiny.gguf"));
  {
    auto b = good;
    auto at = find_info(b, "test.arr_i32");
    poke<std::uint64_t>(b, at + 8 + 12 + 8, std::uint64_t{1} << 61);
    auto msg = message_of(b);
    CHECK(msg.find("array length") != std::string::npos);
    CHECK(msg.find(fmt::format("at byte {}", at + 8 + 12 + 8)) != std::string::npos);
  }
  {
    auto b = good;
    auto at = find_info(b, "test.string");
    poke<std::uint64_t>(b, at, std::uint64_t{1} << 50);
    CHECK(message_of(b).find("metadata key of 1125899906842624 bytes") != std::string::npos);
  }
  {
    auto b = good;
    auto at = find_info(b, "test.bool_true");
    b[at + 8 + 14 + 4] = std::byte{7};
    CHECK(message_of(b).find("bool (0 or 1)") != std::string::npos);
  }
  {
    auto b = slurp(fixture("tiny_align64.gguf"));
    REQUIRE(gguf_file::from_bytes(b).alignment() == 64);
    auto at = find_info(b, "general.alignment");
    poke<std::uint32_t>(b, at + 8 + 17 + 4, 48);
    CHECK(message_of(b).find("power of two, found 48") != std::string::npos);
  }
}
