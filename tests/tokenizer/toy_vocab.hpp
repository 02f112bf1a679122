#pragma once
// Small hand-made vocabs shared by the tokenizer tests.
#include <tf/tokenizer/detail/unicode.hpp>
#include <tf/tokenizer/vocab.hpp>

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace toy {

/// A SentencePiece vocab: specials, "\n" user-defined, 256 byte tokens, then scored pieces.
inline tf::tokenizer::vocab spm(bool add_space_prefix = false) {
  using tt = tf::tokenizer::token_type;
  tf::tokenizer::vocab v;
  v.kind = tf::tokenizer::model_kind::spm;
  auto add = [&](std::string text, float score, tt type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, tt::unknown);
  add("<s>", 0, tt::control);
  add("</s>", 0, tt::control);
  add("<start_of_turn>", 0, tt::control);
  add("<end_of_turn>", 0, tt::control);
  add("\n", 0, tt::user_defined);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0, tt::byte);
  const std::pair<const char*, float> pieces[] = {{"\xE2\x96\x81", -20},
                                                  {"h", -20},
                                                  {"e", -20},
                                                  {"l", -20},
                                                  {"o", -20},
                                                  {"w", -20},
                                                  {"r", -20},
                                                  {"d", -20},
                                                  {"a", -20},
                                                  {"b", -20},
                                                  {"c", -20},
                                                  {"he", -1},
                                                  {"ll", -2},
                                                  {"llo", -3},
                                                  {"hello", -4},
                                                  {"\xE2\x96\x81w", -5},
                                                  {"or", -6},
                                                  {"ld", -7},
                                                  {"orld", -8},
                                                  {"\xE2\x96\x81world", -9},
                                                  {"\xE2\x96\x81hello", -10},
                                                  {"aa", -1},
                                                  {"ab", -3},
                                                  {"bc", -2}};
  for (const auto& [text, score] : pieces) add(text, score, tt::normal);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  v.add_bos = true;
  v.add_space_prefix = add_space_prefix;
  return v;
}

/// A byte-level BPE vocab: the 256 byte tokens, a few merges, and two specials.
inline tf::tokenizer::vocab bpe(std::string pre = "qwen2") {
  using tt = tf::tokenizer::token_type;
  tf::tokenizer::vocab v;
  v.kind = tf::tokenizer::model_kind::bpe;
  v.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(tf::tokenizer::detail::byte_to_utf8()[static_cast<std::size_t>(b)]);
  }
  v.merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or", "a a", "aa a"};
  for (const char* t :
       {"he", "ll", "hell", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor", "aa", "aaa"}) {
    v.tokens.push_back(t);
  }
  v.types.assign(v.tokens.size(), tt::normal);
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(tt::control);
  v.tokens.push_back("<|im_end|>");
  v.types.push_back(tt::control);
  v.eos = static_cast<std::int32_t>(v.tokens.size() - 2);
  return v;
}

/// A "gemma4" vocab (BPE over characters, U+2581 spaces): specials, newline runs, byte tokens,
/// single characters (but no 'z' or 'é') and a few merges.
inline tf::tokenizer::vocab spm_bpe() {
  using tt = tf::tokenizer::token_type;
  tf::tokenizer::vocab v;
  v.kind = tf::tokenizer::model_kind::spm_bpe;
  auto add = [&](std::string text, tt type) {
    v.tokens.push_back(std::move(text));
    v.types.push_back(type);
  };
  add("<pad>", tt::control);
  add("<eos>", tt::control);
  add("<bos>", tt::control);
  add("<turn|>", tt::control);
  add("<|tool_call>", tt::user_defined);
  add("\n", tt::normal);
  add("\n\n", tt::normal);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), tt::byte);
  for (const char* t : {"\xE2\x96\x81", "h", "e", "l", "o", "w", "r", "d", "a", "b"})
    add(t, tt::normal);
  v.merges = {"h e",
              "l l",
              "he ll",
              "hell o",
              "\xE2\x96\x81 w",
              "o r",
              "\xE2\x96\x81w or",
              "a a",
              "\xE2\x96\x81 hello"};
  for (const char* t : {"he", "ll", "hell", "hello", "\xE2\x96\x81w", "or", "\xE2\x96\x81wor", "aa",
                        "\xE2\x96\x81hello"})
    add(t, tt::normal);
  v.eos = 1;
  v.bos = 2;
  v.add_bos = true;
  return v;
}

}  // namespace toy
