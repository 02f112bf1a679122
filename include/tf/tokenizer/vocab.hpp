#pragma once
/// tf::tokenizer::vocab: the tokens, scores, types, special ids and flags a tokenizer runs on.
#include <tf/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::tokenizer {

/// A token's role, numbered as GGUF's tokenizer.ggml.token_type.
enum class token_type : std::uint8_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

/// The tokenizer algorithm: SentencePiece-style (GGUF "llama"), byte-level BPE (GGUF "gpt2"), or
/// BPE merges over UTF-8 characters with SentencePiece's U+2581 spaces and <0xNN> byte fallback
/// (GGUF "gemma4", llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4).
enum class model_kind : std::uint8_t { spm, bpe, spm_bpe };

/// Maps GGUF's tokenizer.ggml.model ("llama", "gpt2", "gemma4") to a model_kind.
inline model_kind model_kind_from_name(std::string_view name) {
  if (name == "llama") return model_kind::spm;
  if (name == "gpt2") return model_kind::bpe;
  if (name == "gemma4") return model_kind::spm_bpe;
  throw tf::error("tokenizer: model '{}' is not supported (supported: llama, gpt2, gemma4)", name);
}

/// Maps GGUF's token_type integer to a token_type (anything unknown counts as normal).
inline token_type token_type_from_int(std::int64_t v) {
  return v >= 1 && v <= 6 ? static_cast<token_type>(v) : token_type::normal;
}

/// Everything a tokenizer needs; filled from GGUF metadata or a HF tokenizer.json.
struct vocab {
  model_kind kind = model_kind::spm;
  /// The pre-tokenizer name (GGUF tokenizer.ggml.pre): "default", "gpt2", "qwen2", "qwen35",
  /// "glm4", "pixtral", ...
  std::string pre = "default";
  /// BPE: a pre-token that is itself a token is taken whole, before any merge (tokenizer.json's
  /// model.ignore_merges; GGUF vocabs get it from their pre name, as llama.cpp does).
  bool ignore_merges = false;
  std::vector<std::string> tokens;
  /// Per token; SentencePiece merges prefer higher scores. Empty means all 0.
  std::vector<float> scores;
  /// Per token; empty means all normal.
  std::vector<token_type> types;
  /// BPE merges "left right", ranked by order (first = merged first).
  std::vector<std::string> merges;
  std::int32_t bos = -1;
  std::int32_t eos = -1;
  std::int32_t eot = -1;
  std::int32_t unk = -1;
  std::int32_t pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;

  std::size_t size() const { return tokens.size(); }
  float score(std::int32_t id) const {
    return scores.empty() ? 0.0f : scores[static_cast<std::size_t>(id)];
  }
  token_type type(std::int32_t id) const {
    return types.empty() ? token_type::normal : types[static_cast<std::size_t>(id)];
  }
  bool contains(std::int32_t id) const { return id >= 0 && std::size_t(id) < tokens.size(); }

  /// Throws tf::error when the sizes or special ids do not fit together.
  void validate() const {
    if (tokens.empty()) throw tf::error("tokenizer: the vocab has no tokens");
    if (!scores.empty() && scores.size() != tokens.size()) {
      throw tf::error("tokenizer: {} scores for {} tokens", scores.size(), tokens.size());
    }
    if (!types.empty() && types.size() != tokens.size()) {
      throw tf::error("tokenizer: {} token types for {} tokens", types.size(), tokens.size());
    }
    const std::pair<const char*, std::int32_t> ids[] = {
        {"bos", bos}, {"eos", eos}, {"eot", eot}, {"unk", unk}, {"pad", pad}};
    for (const auto& [name, id] : ids) {
      if (id != -1 && !contains(id)) {
        throw tf::error("tokenizer: {} id {} is outside the vocab of {} tokens", name, id,
                        tokens.size());
      }
    }
    if (add_bos && bos == -1) throw tf::error("tokenizer: add_bos is set but there is no bos id");
    if (add_eos && eos == -1) throw tf::error("tokenizer: add_eos is set but there is no eos id");
  }
};

}  // namespace tf::tokenizer
