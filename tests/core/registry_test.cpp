// Tests include/tf/registry.hpp and families/registry.hpp: every architecture name dispatches.
#include <tf/engine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace {
template <class T>
std::string family_of(std::string_view arch) {
  return T::dispatch(arch, [](auto t) { return std::string(decltype(t)::type::name); });
}
}  // namespace

TEST_CASE("every built-in architecture name dispatches to its family") {
  using tf::families::builtin;
  CHECK(family_of<builtin>("gemma3") == "gemma3");
  CHECK(family_of<builtin>("gemma3_text") == "gemma3");
  CHECK(family_of<builtin>("gemma4") == "gemma4");
  CHECK(family_of<builtin>("gemma4_text") == "gemma4");
  CHECK(family_of<builtin>("qwen3") == "qwen3");
  CHECK(family_of<builtin>("qwen3moe") == "qwen3_moe");
  CHECK(family_of<builtin>("qwen3_moe") == "qwen3_moe");
  CHECK(family_of<builtin>("glm4") == "glm4");
  CHECK(family_of<builtin>("glm4moe") == "glm4_moe");
  CHECK(family_of<builtin>("glm4_moe") == "glm4_moe");
  CHECK(family_of<builtin>("nemotron_h") == "nemotron_h");
  CHECK(family_of<builtin>("nemotron_h_moe") == "nemotron_h");
  CHECK(family_of<builtin>("qwen35") == "qwen35");
  CHECK(family_of<builtin>("qwen3_5_text") == "qwen35");
  CHECK(family_of<builtin>("qwen35moe") == "qwen35_moe");
  CHECK(family_of<builtin>("qwen3_5_moe") == "qwen35_moe");
  CHECK(family_of<builtin>("qwen3next") == "qwen3_next");
  CHECK(family_of<builtin>("qwen3_next") == "qwen3_next");
  auto names = builtin::architectures();
  CHECK(names.size() == 20);
  for (auto const& n : names) CHECK(builtin::knows(n));
}

TEST_CASE("an unknown architecture names the known set") {
  try {
    tf::families::dispatch("llama", [](auto) {});
    FAIL("dispatch accepted an unknown architecture");
  } catch (tf::error const& e) {
    std::string what = e.what();
    CHECK(what.find("unknown architecture 'llama'") != std::string::npos);
    CHECK(what.find("gemma3_text") != std::string::npos);
    CHECK(what.find("nemotron_h_moe") != std::string::npos);
  }
}

TEST_CASE("families bind exactly one pool trait") {
  using namespace tf::families;
  STATIC_REQUIRE(tf::binds_kv_pool<gemma::gemma3>);
  STATIC_REQUIRE(!tf::binds_ledger_pool<gemma::gemma3>);
  STATIC_REQUIRE(tf::binds_ledger_pool<nemotron::nemotron_h>);
  STATIC_REQUIRE(std::is_same_v<tf::pool_of<qwen::qwen3>, tf::kv::paged_pool>);
  STATIC_REQUIRE(std::is_same_v<tf::pool_of<nemotron::nemotron_h>, tf::kv::hybrid_pool>);
}

namespace {
// A family with traits but no `model`: recognised, refused at run time.
struct forwardless {
  static constexpr std::string_view name = "forwardless";
  static constexpr std::array<std::string_view, 1> arch_names{"tf-forwardless"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = true;
  struct hparams {};
};

// A GGUF at `path` with no tensors and one metadata entry: general.architecture = `arch`.
void write_empty_gguf(std::filesystem::path const& path, std::string const& arch) {
  std::ofstream f(path, std::ios::binary);
  auto u32 = [&](std::uint32_t v) { f.write(reinterpret_cast<char const*>(&v), 4); };
  auto u64 = [&](std::uint64_t v) { f.write(reinterpret_cast<char const*>(&v), 8); };
  auto str = [&](std::string const& s) {
    u64(s.size());
    f.write(s.data(), static_cast<std::streamsize>(s.size()));
  };
  f.write("GGUF", 4);
  u32(3);  // version
  u64(0);  // tensors
  u64(1);  // metadata entries
  str("general.architecture");
  u32(8);  // string
  str(arch);
}
}  // namespace

TEST_CASE("a family without a forward says so at run time") {
  using namespace tf::families;
  using with_forwardless = builtin::with<forwardless>;
  // Whether a family runs on a backend is derived from its traits' `model` member.
  STATIC_REQUIRE_FALSE(tf::has_forward<forwardless, tf::backend::cpu>);
  STATIC_REQUIRE(tf::has_forward<nemotron::nemotron_h, tf::backend::cpu>);
  STATIC_REQUIRE(tf::has_forward<gemma::gemma3, tf::backend::cpu>);
  STATIC_REQUIRE(tf::has_forward<glm::glm4_moe, tf::backend::cpu>);
  CHECK_THROWS_WITH((tf::require_forward<forwardless, tf::backend::cpu>()),
                    Catch::Contains("'forwardless' family is recognised"));
  CHECK_NOTHROW(tf::require_forward<qwen::qwen3, tf::backend::cpu>());
  CHECK_NOTHROW(tf::require_forward<nemotron::nemotron_h, tf::backend::cpu>());
  // tf::open of a file with that architecture refuses it with the same message.
  auto const path = std::filesystem::temp_directory_path() / "tf_registry_forwardless.gguf";
  write_empty_gguf(path, "tf-forwardless");
  CHECK_THROWS_WITH(tf::open<with_forwardless>(path),
                    Catch::Contains("'forwardless' family is recognised but has no forward pass "
                                    "on the cpu backend"));
  // A family with a forward gets as far as reading the file's hyper-parameters.
  write_empty_gguf(path, "nemotron_h");
  CHECK_THROWS_WITH(tf::open(path), Catch::Contains("nemotron_h GGUF lacks the metadata key"));
  std::filesystem::remove(path);
}

namespace {
// Gemma 3 asking for a capability the CPU backend lacks (it samples on the host).
struct wants_device_sampling : tf::families::gemma::gemma3 {
  static constexpr std::string_view name = "wants_device_sampling";
  static constexpr std::array<std::string_view, 1> arch_names{"tf-wants-device-sampling"};
  using backend_needs = tf::backend::needs<tf::backend::sampling_on_device>;
};
}  // namespace

TEST_CASE("a family runs only on a backend that offers the capabilities it lists") {
  using namespace tf::families;
  using tf::backend::cpu;
  // The CPU backend offers every capability but sampling on the device.
  STATIC_REQUIRE(tf::backend::offers<cpu, tf::backend::recurrent_layers>);
  STATIC_REQUIRE(tf::backend::offers<cpu, tf::backend::routed_experts>);
  STATIC_REQUIRE(tf::backend::offers<cpu, tf::backend::split_weights>);
  STATIC_REQUIRE_FALSE(tf::backend::offers<cpu, tf::backend::sampling_on_device>);
  // Families list what their forward uses; the dense ones need only the core.
  STATIC_REQUIRE(std::is_same_v<tf::backend::needs_of<gemma::gemma3>, tf::backend::needs<>>);
  STATIC_REQUIRE(std::is_same_v<
                 tf::backend::needs_of<nemotron::nemotron_h>,
                 tf::backend::needs<tf::backend::recurrent_layers, tf::backend::routed_experts>>);
  STATIC_REQUIRE(tf::runs_on<qwen::qwen3_next, cpu>);
  STATIC_REQUIRE(tf::has_forward<wants_device_sampling, cpu>);
  STATIC_REQUIRE_FALSE(tf::runs_on<wants_device_sampling, cpu>);
  CHECK(tf::backend::missing_capability<wants_device_sampling, cpu> ==
        tf::backend::sampling_on_device::name);
  CHECK(tf::backend::missing_capability<qwen::qwen35_moe, cpu>.empty());
  CHECK_THROWS_WITH((tf::require_forward<wants_device_sampling, cpu>()),
                    Catch::Contains("'wants_device_sampling' family needs sampling on the device "
                                    "(sample_rows), which the cpu backend does not offer"));
  // tf::open of a file of that family refuses it with the same message, before reading weights.
  auto const path = std::filesystem::temp_directory_path() / "tf_registry_capability.gguf";
  write_empty_gguf(path, "tf-wants-device-sampling");
  CHECK_THROWS_WITH(tf::open<builtin::with<wants_device_sampling>>(path),
                    Catch::Contains("which the cpu backend does not offer"));
  std::filesystem::remove(path);
}

TEST_CASE("tensor maps expand per-layer names") {
  using namespace tf::model;
  auto row = find_role(tf::families::glm::glm4_tensors, tensor_role::ffn_norm);
  REQUIRE(row);
  CHECK(expand(row->gguf, 3) == "blk.3.ffn_norm.weight");
  CHECK(expand(row->hf, 3) == "model.layers.3.post_attention_layernorm.weight");
  CHECK(expand("token_embd.weight", 0) == "token_embd.weight");
  CHECK_FALSE(find_role(tf::families::gemma::gemma3_tensors, tensor_role::attn_q_bias));
}
