#pragma once
/// Builds a tokenizer from a GGUF file's tokenizer.ggml.* metadata.
#include <tf/error.hpp>
#include <tf/model/gguf.hpp>
#include <tf/tokenizer/tokenizer.hpp>
#include <tf/tokenizer/vocab.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace tf::tokenizer {

/// What llama.cpp does to a "gemma4" vocab whatever its file says: BOS always added (its
/// add_bos override), no space prefix, and the channel and tool-call markers user-defined (so
/// they always match and always render, for the reply parsers; its converter writes them so).
inline void force_spm_bpe_flags(vocab& v) {
  v.add_bos = v.bos >= 0;
  v.add_space_prefix = false;
  if (v.types.size() != v.tokens.size()) return;
  for (std::size_t i = 0; i < v.tokens.size(); ++i)
    for (const auto text : detail::spm_bpe_visible_texts)
      if (v.tokens[i] == text) v.types[i] = token_type::user_defined;
}

/// The vocab in `file`'s tokenizer.ggml.* keys; throws tf::error if they are missing or bad.
inline vocab load_vocab(const tf::model::gguf_file& file) {
  vocab v;
  const auto model = file.get_string("tokenizer.ggml.model");
  if (!model) {
    throw tf::error("tokenizer: {} has no tokenizer.ggml.model key", file.source());
  }
  v.kind = model_kind_from_name(*model);
  v.pre = std::string(file.get_string("tokenizer.ggml.pre").value_or("default"));
  for (const auto t : file.get_string_array("tokenizer.ggml.tokens")) v.tokens.emplace_back(t);
  if (v.tokens.empty()) {
    throw tf::error("tokenizer: {} has no tokenizer.ggml.tokens", file.source());
  }
  v.scores = file.get_float_array("tokenizer.ggml.scores");
  const auto types = file.get_int_array("tokenizer.ggml.token_type");
  v.types.reserve(types.size());
  for (const auto t : types) v.types.push_back(token_type_from_int(t));
  for (const auto m : file.get_string_array("tokenizer.ggml.merges")) v.merges.emplace_back(m);
  if (v.kind != model_kind::spm && v.merges.empty()) {
    throw tf::error("tokenizer: {} is a BPE vocab without tokenizer.ggml.merges", file.source());
  }
  auto id = [&](std::string_view key) -> std::int32_t {
    const auto value = file.get_int(key);
    if (!value) return -1;
    if (*value < 0 || static_cast<std::uint64_t>(*value) >= v.tokens.size()) {
      throw tf::error("tokenizer: {} {} = {} is outside the vocab of {} tokens", file.source(), key,
                      *value, v.tokens.size());
    }
    return static_cast<std::int32_t>(*value);
  };
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.eot = id("tokenizer.ggml.eot_token_id");
  v.unk = id("tokenizer.ggml.unknown_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  // SentencePiece vocabs add BOS and a space prefix unless the file says otherwise; so do the
  // Llama 3 pre names for BOS (llama.cpp's LLAMA_VOCAB_PRE_TYPE_LLAMA3 default).
  const bool spm = v.kind == model_kind::spm;
  const bool bos_default = spm || (v.kind == model_kind::bpe && detail::is_llama3_pre(v.pre));
  v.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(bos_default) && v.bos >= 0;
  v.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false) && v.eos >= 0;
  v.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  if (v.kind == model_kind::spm_bpe) force_spm_bpe_flags(v);
  return v;
}

/// The tokenizer of a GGUF model file.
inline tokenizer load_tokenizer(const tf::model::gguf_file& file) {
  return tokenizer(load_vocab(file));
}

}  // namespace tf::tokenizer
