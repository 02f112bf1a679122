#pragma once
/// Builds a byte-level BPE tokenizer from a Hugging Face tokenizer.json (and, optionally, the
/// bos/eos entries of its tokenizer_config.json).
#include <tf/error.hpp>
#include <tf/tokenizer/tokenizer.hpp>
#include <tf/tokenizer/vocab.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tf::tokenizer {

namespace detail {

inline constexpr std::string_view qwen2_split_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view qwen35_split_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view glm4_split_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// Finds the pre-tokenizer style of a tokenizer.json "pre_tokenizer" node ("" when none).
inline void find_pre_style(const nlohmann::json& node, std::string& style, bool& byte_level) {
  if (!node.is_object()) return;
  const std::string type = node.value("type", "");
  if (type == "Sequence" && node.contains("pretokenizers")) {
    for (const auto& p : node["pretokenizers"]) find_pre_style(p, style, byte_level);
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (node.value("use_regex", true) && style.empty()) style = "gpt2";
  } else if (type == "Split") {
    const auto& pattern = node.value("pattern", nlohmann::json::object());
    const std::string regex = pattern.value("Regex", "");
    if (regex == qwen2_split_regex) {
      style = "qwen2";
    } else if (regex == qwen35_split_regex) {
      style = "qwen35";
    } else if (regex == glm4_split_regex) {
      style = "glm4";
    } else {
      throw tf::error("tokenizer: tokenizer.json splits with a regex tf does not know: {}", regex);
    }
  }
}

inline std::int32_t token_by_text(const vocab& v, const nlohmann::json& entry) {
  std::string text;
  if (entry.is_string()) {
    text = entry.get<std::string>();
  } else if (entry.is_object() && entry.contains("content")) {
    text = entry["content"].get<std::string>();
  } else {
    return -1;
  }
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.tokens[i] == text) return static_cast<std::int32_t>(i);
  }
  return -1;
}

}  // namespace detail

namespace detail {

/// A token id from tokenizer.json: an integer (a float there is malformed input, and converting
/// it would be undefined behaviour).
inline std::int64_t token_id(nlohmann::json const& v) {
  if (!v.is_number_integer())
    throw tf::error("tokenizer: tokenizer.json token id {} is not an integer", v.dump());
  return v.get<std::int64_t>();
}

}  // namespace detail

/// The vocab of a parsed tokenizer.json; `config` (tokenizer_config.json, may be null) gives
/// bos_token, eos_token, add_bos_token and add_eos_token.
inline vocab vocab_from_hf_json(const nlohmann::json& j, const nlohmann::json& config = nullptr) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    throw tf::error("tokenizer: tokenizer.json has no \"model\" object");
  }
  const auto& model = j["model"];
  const std::string type = model.value("type", "");
  if (type != "BPE") {
    throw tf::error("tokenizer: tokenizer.json model type '{}' is not supported (supported: BPE)",
                    type);
  }
  std::string style;
  bool byte_level = false;
  if (j.contains("pre_tokenizer")) detail::find_pre_style(j["pre_tokenizer"], style, byte_level);
  if (!byte_level || style.empty()) {
    throw tf::error("tokenizer: tokenizer.json is not a byte-level BPE with a known split regex");
  }
  vocab v;
  v.kind = model_kind::bpe;
  v.pre = style;
  v.ignore_merges = model.value("ignore_merges", false);
  std::int64_t max_id = -1;
  for (const auto& [text, id] : model.at("vocab").items())
    max_id = std::max(max_id, detail::token_id(id));
  if (j.contains("added_tokens")) {
    for (const auto& t : j["added_tokens"]) max_id = std::max(max_id, detail::token_id(t.at("id")));
  }
  if (max_id < 0 || max_id > (std::int64_t{1} << 26)) {
    throw tf::error("tokenizer: tokenizer.json has a bad largest token id {}", max_id);
  }
  v.tokens.assign(static_cast<std::size_t>(max_id + 1), std::string());
  v.types.assign(v.tokens.size(), token_type::unused);
  auto place = [&](std::int64_t id, std::string text, token_type t) {
    if (id < 0) throw tf::error("tokenizer: tokenizer.json has a negative token id {}", id);
    v.tokens[static_cast<std::size_t>(id)] = std::move(text);
    v.types[static_cast<std::size_t>(id)] = t;
  };
  for (const auto& [text, id] : model.at("vocab").items()) {
    place(detail::token_id(id), text, token_type::normal);
  }
  if (j.contains("added_tokens")) {
    for (const auto& t : j["added_tokens"]) {
      place(detail::token_id(t.at("id")), t.at("content").get<std::string>(),
            t.value("special", false) ? token_type::control : token_type::user_defined);
    }
  }
  for (const auto& m : model.at("merges")) {
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2) {
      v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      throw tf::error("tokenizer: tokenizer.json merge {} is neither \"a b\" nor [a, b]", m.dump());
    }
  }
  if (config.is_object()) {
    if (config.contains("bos_token")) v.bos = detail::token_by_text(v, config["bos_token"]);
    if (config.contains("eos_token")) v.eos = detail::token_by_text(v, config["eos_token"]);
    if (config.contains("pad_token")) v.pad = detail::token_by_text(v, config["pad_token"]);
    v.add_bos = config.value("add_bos_token", false) && v.bos >= 0;
    v.add_eos = config.value("add_eos_token", false) && v.eos >= 0;
  }
  return v;
}

/// Reads a JSON file; throws tf::error naming the path when it is missing or not JSON.
inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tf::error("tokenizer: cannot open {}", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw tf::error("tokenizer: {} is not valid JSON: {}", path.string(), e.what());
  }
}

/// The tokenizer of a tokenizer.json, with tokenizer_config.json beside it when present.
inline tokenizer load_hf_tokenizer(const std::filesystem::path& tokenizer_json) {
  nlohmann::json config = nullptr;
  const auto config_path = tokenizer_json.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) config = read_json_file(config_path);
  return tokenizer(vocab_from_hf_json(read_json_file(tokenizer_json), config));
}

}  // namespace tf::tokenizer
