#pragma once
/// tf::tokenizer::tokenizer: text <-> token ids for SentencePiece-style and byte-level BPE vocabs.
#include <tf/error.hpp>
#include <tf/tokenizer/bpe.hpp>
#include <tf/tokenizer/detail/pretokenize.hpp>
#include <tf/tokenizer/detail/token_index.hpp>
#include <tf/tokenizer/detail/unicode.hpp>
#include <tf/tokenizer/spm.hpp>
#include <tf/tokenizer/vocab.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tf::tokenizer {

namespace detail {

/// SentencePiece's visible space, U+2581.
inline constexpr std::string_view spm_space = "\xE2\x96\x81";

/// The GGUF tokenizer.ggml.pre names tf knows, each with llama.cpp's split regex for it.
struct pre_name {
  std::string_view name;
  pre_style style;
};
inline constexpr std::array<pre_name, 10> pre_names{{
    {"default", pre_style::gpt2},
    {"gpt2", pre_style::gpt2},
    {"gpt-2", pre_style::gpt2},
    {"qwen2", pre_style::qwen2},
    {"qwen35", pre_style::qwen35},  // Qwen3.5 / Qwen3.6
    {"glm4", pre_style::glm4},
    {"chatglm-bpe", pre_style::glm4},
    {"llama3", pre_style::glm4},  // llama.cpp LLAMA_VOCAB_PRE_TYPE_LLAMA3: the same regex
    {"llama-bpe", pre_style::glm4},
    {"pixtral", pre_style::glm4},  // Nemotron-H / Nemotron 3 GGUFs (Mistral-derived vocab)
}};

/// The names llama.cpp gives LLAMA_VOCAB_PRE_TYPE_LLAMA3, which also takes a pre-token that is
/// a whole vocab token as that token (ignore_merges) and adds BOS unless the file says not to.
inline bool is_llama3_pre(std::string_view pre) {
  return pre == "llama3" || pre == "llama-bpe" || pre == "pixtral";
}

/// The pre-tokenizer a byte-level BPE vocab names (GGUF tokenizer.ggml.pre).
inline pre_style pre_style_from_name(std::string_view pre) {
  for (const auto& p : pre_names) {
    if (p.name == pre) return p.style;
  }
  std::string known;
  for (const auto& p : pre_names) {
    known += known.empty() ? "" : ", ";
    known += p.name;
  }
  throw tf::error("tokenizer: pre-tokenizer '{}' is not supported (supported: {})", pre, known);
}

/// Texts of turn-ending control tokens, so is_eog stops on them even without a GGUF eot id.
inline constexpr std::array<std::string_view, 11> end_of_turn_texts{
    "<end_of_turn>", "<|eot_id|>", "<|im_end|>",      "<|end|>",    "<|eom_id|>", "<EOT>",
    "<|endoftext|>", "<|user|>",   "<|observation|>", "<|return|>", "<turn|>"};

/// Texts that end generation whatever their type: a "gemma4" vocab's tool-response opener is
/// user-defined (it must render) yet ends the turn, as in llama.cpp.
inline constexpr std::array<std::string_view, 1> end_of_turn_any_type{"<|tool_response>"};

/// The "gemma4" vocab's channel, tool-call and string-quote markers: user-defined, as llama.cpp's
/// converter writes them, so a reply's text keeps them for the parsers.
inline constexpr std::array<std::string_view, 7> spm_bpe_visible_texts{
    "<|channel>",       "<channel|>",       "<|tool_call>", "<tool_call|>",
    "<|tool_response>", "<tool_response|>", "<|\"|>"};

}  // namespace detail

/// Encodes and decodes text for one vocab; cheap to copy, safe to share between threads.
class tokenizer {
 public:
  using vocab_type = ::tf::tokenizer::vocab;

  /// Validates `v` and builds the lookup tables; throws tf::error on an inconsistent vocab.
  explicit tokenizer(vocab_type v) : impl_(std::make_shared<impl>(std::move(v))) {}

  /// The ids of `text`. `add_bos` adds the special tokens the vocab asks for (BOS when
  /// vocab().add_bos, EOS when vocab().add_eos); `parse_special` turns control-token texts
  /// such as "<start_of_turn>" into their ids (user-defined tokens always match).
  std::vector<std::int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const {
    const impl& m = *impl_;
    const vocab_type& v = m.vocab;
    if (text.size() >= std::numeric_limits<std::uint32_t>::max()) {
      throw tf::error("tokenizer: text of {} bytes is over the 4 GiB limit", text.size());
    }
    std::vector<std::int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_bos && v.add_bos) out.push_back(v.bos);
    const detail::special_trie& trie = parse_special ? m.special_all : m.special_user;
    bool after_special = true;
    std::size_t raw_begin = 0;
    auto flush_raw = [&](std::size_t end) {
      if (end > raw_begin) encode_raw(text.substr(raw_begin, end - raw_begin), after_special, out);
      after_special = false;
    };
    if (!trie.empty()) {
      for (std::size_t pos = 0; pos < text.size();) {
        if (!trie.may_start(text[pos])) {
          ++pos;
          continue;
        }
        const auto [id, len] = trie.longest(text, pos);
        if (id < 0) {
          ++pos;
          continue;
        }
        flush_raw(pos);
        out.push_back(id);
        after_special = true;
        pos += len;
        raw_begin = pos;
      }
    }
    flush_raw(text.size());
    if (add_bos && v.add_eos) out.push_back(v.eos);
    return out;
  }

  /// The text of `ids`; control tokens render as their text only when `render_special`.
  std::string decode(std::span<const std::int32_t> ids, bool render_special = false) const {
    std::string out;
    bool at_start = true;
    for (const std::int32_t id : ids) append_piece(id, render_special, at_start, out);
    return out;
  }

  /// The bytes one token stands for (may be part of a UTF-8 character).
  std::string token_to_piece(std::int32_t id, bool render_special = false) const {
    std::string out;
    bool at_start = false;
    append_piece(id, render_special, at_start, out);
    return out;
  }

  /// Appends token `id`'s bytes to `out`; `at_start` tracks the one leading space a
  /// add_space_prefix vocab strips from the first text token.
  void append_piece(std::int32_t id, bool render_special, bool& at_start, std::string& out) const {
    const vocab_type& v = impl_->vocab;
    if (!v.contains(id)) {
      throw tf::error("tokenizer: token id {} is outside the vocab of {} tokens", id, v.size());
    }
    const std::string& text = v.tokens[static_cast<std::size_t>(id)];
    switch (v.type(id)) {
      case token_type::control:
      case token_type::unknown:
      case token_type::unused:
        if (render_special) out += text;
        return;
      case token_type::user_defined:
        out += text;
        at_start = false;
        return;
      case token_type::byte:
        if (v.kind != model_kind::bpe) {
          out.push_back(static_cast<char>(impl_->byte_of[static_cast<std::size_t>(id)]));
          at_start = false;
          return;
        }
        break;
      case token_type::normal:
        break;
    }
    const std::size_t start = out.size();
    if (v.kind != model_kind::bpe) {
      append_unescaped(text, out);
    } else {
      append_byte_level(text, out);
    }
    if (at_start && v.add_space_prefix && out.size() > start && out[start] == ' ') {
      out.erase(start, 1);
    }
    at_start = false;
  }

  /// Whether generation ends at `id` (eos, eot, or a known end-of-turn control token).
  bool is_eog(std::int32_t id) const { return impl_->eog.contains(id); }

  /// The id of a token by its exact text.
  std::optional<std::int32_t> token_id(std::string_view text) const {
    const auto it = impl_->index.find(text);
    if (it == impl_->index.end()) return std::nullopt;
    return it->second;
  }

  const vocab_type& vocab() const { return impl_->vocab; }
  std::size_t n_tokens() const { return impl_->vocab.size(); }

 private:
  struct impl {
    explicit impl(vocab_type v) : vocab(std::move(v)) {
      vocab.validate();
      index = detail::make_token_index(vocab);
      if (vocab.kind == model_kind::spm) {
        spm.emplace(vocab, index);
      } else if (vocab.kind == model_kind::spm_bpe) {
        bpe.emplace(vocab, index);
      } else {
        pre = detail::pre_style_from_name(vocab.pre);
        ignore_merges = vocab.ignore_merges || detail::is_llama3_pre(vocab.pre);
        bpe.emplace(vocab, index);
      }
      if (vocab.kind != model_kind::bpe) {
        byte_of.assign(vocab.size(), 0);
        for (int b = 0; b < 256; ++b) {
          const std::int32_t id = detail::byte_token_id(index, static_cast<unsigned char>(b));
          if (id >= 0) byte_of[static_cast<std::size_t>(id)] = static_cast<std::uint8_t>(b);
        }
      }
      for (std::size_t i = 0; i < vocab.size(); ++i) {
        const auto id = static_cast<std::int32_t>(i);
        const token_type t = vocab.type(id);
        if (t == token_type::control || t == token_type::unknown) {
          special_all.insert(vocab.tokens[i], id);
        } else if (t == token_type::user_defined) {
          special_all.insert(vocab.tokens[i], id);
          special_user.insert(vocab.tokens[i], id);
        }
      }
      if (vocab.eot < 0) {
        for (const auto text : detail::end_of_turn_texts) {
          const auto it = index.find(text);
          if (it != index.end() && vocab.type(it->second) == token_type::control &&
              text != "<|endoftext|>") {
            vocab.eot = it->second;
            break;
          }
        }
      }
      for (const auto text : detail::end_of_turn_any_type) {
        if (const auto it = index.find(text); it != index.end()) eog.insert(it->second);
      }
      if (vocab.eos >= 0) eog.insert(vocab.eos);
      if (vocab.eot >= 0) eog.insert(vocab.eot);
      for (const auto text : detail::end_of_turn_texts) {
        const auto it = index.find(text);
        if (it != index.end() && vocab.type(it->second) == token_type::control) {
          eog.insert(it->second);
        }
      }
    }
    impl(const impl&) = delete;
    impl& operator=(const impl&) = delete;

    vocab_type vocab;
    detail::token_index index;  // views into vocab.tokens: impl never moves
    std::optional<spm_model> spm;
    std::optional<bpe_model> bpe;
    detail::pre_style pre = detail::pre_style::gpt2;
    bool ignore_merges = false;         // a pre-token that is a whole token is that token
    std::vector<std::uint8_t> byte_of;  // [n_tokens] byte of each <0xNN> token (spm, spm_bpe)
    detail::special_trie special_all;   // control, unknown and user-defined tokens
    detail::special_trie special_user;  // user-defined tokens only
    std::unordered_set<std::int32_t> eog;
  };

  void encode_raw(std::string_view raw, bool after_special, std::vector<std::int32_t>& out) const {
    const impl& m = *impl_;
    if (m.spm) {
      std::string escaped;
      escaped.reserve(raw.size() + raw.size() / 2 + 3);
      if (m.vocab.add_space_prefix && after_special) escaped += detail::spm_space;
      for (const char c : raw) {
        if (c == ' ') {
          escaped += detail::spm_space;
        } else {
          escaped.push_back(c);
        }
      }
      m.spm->encode(escaped, out);
      return;
    }
    if (m.vocab.kind == model_kind::spm_bpe) {
      encode_spm_bpe(raw, out);
      return;
    }
    std::string encoded;
    for (const auto& s : detail::pre_tokenize(raw, m.pre)) {
      const std::string_view word = raw.substr(s.begin, s.end - s.begin);
      if (m.ignore_merges) {
        encoded.clear();
        for (const char c : word) encoded += detail::byte_to_utf8()[static_cast<unsigned char>(c)];
        if (const auto it = m.index.find(encoded); it != m.index.end()) {
          out.push_back(it->second);
          continue;
        }
      }
      m.bpe->encode(word, out);
    }
  }

  // Spaces become U+2581, then each run of newlines and each run of other text merges on its own
  // (llama.cpp's "[^\n]+|[\n]+" split); a newline run that is a token is taken whole.
  void encode_spm_bpe(std::string_view raw, std::vector<std::int32_t>& out) const {
    const impl& m = *impl_;
    std::string escaped;
    escaped.reserve(raw.size() + raw.size() / 2);
    for (const char c : raw) {
      if (c == ' ') {
        escaped += detail::spm_space;
      } else {
        escaped.push_back(c);
      }
    }
    const std::string_view text = escaped;
    for (std::size_t begin = 0; begin < text.size();) {
      const bool newlines = text[begin] == '\n';
      std::size_t end = newlines ? text.find_first_not_of('\n', begin) : text.find('\n', begin);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view word = text.substr(begin, end - begin);
      begin = end;
      if (newlines) {
        if (const auto it = m.index.find(word); it != m.index.end()) {
          out.push_back(it->second);
          continue;
        }
      }
      m.bpe->encode_chars(word, m.index, out);
    }
  }

  static void append_unescaped(std::string_view text, std::string& out) {
    for (std::size_t i = 0; i < text.size();) {
      if (text.compare(i, detail::spm_space.size(), detail::spm_space) == 0) {
        out.push_back(' ');
        i += detail::spm_space.size();
      } else {
        out.push_back(text[i++]);
      }
    }
  }

  static void append_byte_level(std::string_view text, std::string& out) {
    const auto& inverse = detail::cp_to_byte();
    for (std::size_t i = 0; i < text.size();) {
      const auto d = detail::decode_utf8(text, i);
      if (d.cp < inverse.size() && inverse[d.cp] >= 0) {
        out.push_back(static_cast<char>(inverse[d.cp]));
      } else {
        out.append(text.substr(i, d.len));  // not a mapped byte: keep the text as it is
      }
      i += d.len;
    }
  }

  std::shared_ptr<const impl> impl_;
};

}  // namespace tf::tokenizer
