#pragma once
/// Test helper: a deterministic toy model and byte codec. Logits are a pure function of a row's
/// token history, kept in its KV pages, so batched == solo is checkable without a real model.
#include <tf/batch.hpp>
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/kv/paged_pool.hpp>
#include <tf/tokenizer/chat_template.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tf::serve {

using tf::batch_row;

/// Toy vocabulary: ids 0..255 are bytes, then BOS and EOS.
struct toy_vocab {
  static constexpr std::int32_t bos = 256;
  static constexpr std::int32_t eos = 257;
  static constexpr std::size_t size = 258;
};

/// splitmix64's finalizer: the toy models' hash.
inline std::uint64_t toy_mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// One logits row from a hash: printable ASCII is likely, EOS rare, the rest never.
inline void toy_logits(std::uint64_t h, float* out) {
  for (std::size_t v = 0; v < toy_vocab::size; ++v) {
    auto r = toy_mix(h + v * 0x2545f4914f6cdd1dull);
    float u = static_cast<float>(r >> 40) / static_cast<float>(1u << 24);  // [0, 1)
    bool printable = (v >= 'a' && v <= 'z') || v == ' ' || v == '.';
    out[v] = printable ? 4.0f * u : (v == toy_vocab::eos ? 4.0f * u - 1.0f : -20.0f);
  }
}

/// The toy model's family traits: the engine's paged pool, per-request admission.
struct toy_family {
  static constexpr std::string_view name = "toy";
  static constexpr std::array<std::string_view, 1> arch_names{"tf-toy"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = true;
  static constexpr bool has_forward = true;
  struct hparams {};
};

/// A paged "model": each KV slot keeps a running hash of the history up to it; logits come from
/// the hash, so a wrong page table or position changes the reply.
class toy_model {
 public:
  /// `delay` is slept once per forward call, to stand in for compute.
  toy_model(std::size_t num_pages, std::size_t page_tokens,
            std::chrono::microseconds delay = std::chrono::microseconds(0))
      : pages_(num_pages),
        page_tokens_(page_tokens),
        delay_(delay),
        slots_(num_pages * page_tokens, 0) {}

  std::size_t vocab_size() const { return toy_vocab::size; }
  std::size_t page_tokens() const { return page_tokens_; }
  std::size_t num_pages() const { return pages_; }
  std::uint64_t forward_calls() const { return calls_; }

  /// Page `to` takes page `from`'s hashes.
  void copy_page(std::int32_t from, std::int32_t to) {
    if (from < 0 || to < 0 || static_cast<std::size_t>(from) >= pages_ ||
        static_cast<std::size_t>(to) >= pages_)
      throw error("tf: toy model: page copy {} -> {} outside the pool of {}", from, to, pages_);
    ++page_copies_;
    if (drop_page_copies) return;
    std::copy_n(
        slots_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(from) * page_tokens_),
        page_tokens_,
        slots_.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(to) * page_tokens_));
  }
  std::uint64_t page_copies() const { return page_copies_; }
  /// A broken model for negative tests: copy_page does nothing.
  bool drop_page_copies = false;

  /// Writes each row's hashes into its pages and one logits row per row (or per token).
  void forward(std::span<batch_row const> rows, float* logits) {
    ++calls_;
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    for (auto const& row : rows) {
      for (std::size_t i = 0; i < row.tokens.size(); ++i) {
        auto const pos = static_cast<std::size_t>(row.start_pos) + i;
        std::uint64_t prev = pos == 0 ? 0x9e3779b97f4a7c15ull : slot(row, pos - 1);
        auto tok = row.tokens[i];
        if (tok < 0 || static_cast<std::size_t>(tok) >= toy_vocab::size)
          throw error("tf: toy model got token {} outside its vocabulary", tok);
        slot(row, pos) =
            toy_mix(prev ^ (static_cast<std::uint64_t>(tok) + 1) * 0xff51afd7ed558ccdull);
        if (row.all_logits || i + 1 == row.tokens.size()) {
          toy_logits(slot(row, pos), logits);
          logits += toy_vocab::size;
        }
      }
    }
  }

 private:
  std::uint64_t& slot(batch_row const& row, std::size_t pos) {
    auto const page = pos / page_tokens_;
    if (page >= row.page_table.size())
      throw error("tf: toy model: position {} needs page {} of a {}-page table", pos, page,
                  row.page_table.size());
    auto const id = row.page_table[page];
    if (id < 0 || static_cast<std::size_t>(id) >= pages_)
      throw error("tf: toy model: page id {} outside the pool of {}", id, pages_);
    return slots_[static_cast<std::size_t>(id) * page_tokens_ + pos % page_tokens_];
  }

  std::size_t pages_, page_tokens_;
  std::chrono::microseconds delay_;
  std::vector<std::uint64_t> slots_;  // [num_pages, page_tokens]
  std::uint64_t calls_ = 0;
  std::uint64_t page_copies_ = 0;
};

/// Text <-> tokens for the toy model: one token per byte, a plain chat rendering (or, when
/// `template_src` is set, that chat template's).
struct toy_codec {
  std::string template_src;
  std::string const& chat_template() const { return template_src; }
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> out{toy_vocab::bos};
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  std::string piece(std::int32_t t) const {
    return t >= 0 && t < 256 ? std::string(1, static_cast<char>(t)) : std::string();
  }
  /// One "role: content" line per message; template kwargs, when given, as a first line.
  std::string render_chat(nlohmann::json const& messages,
                          nlohmann::json const& kwargs = nlohmann::json::object()) const {
    if (!template_src.empty()) {
      auto opts = kwargs;
      opts["add_generation_prompt"] = true;
      return tf::tokenizer::render_chat(template_src, messages, opts);
    }
    std::string s = kwargs.empty() ? std::string() : "kwargs: " + kwargs.dump() + "\n";
    for (auto const& m : messages)
      s += m.at("role").get<std::string>() + ": " + m.at("content").get<std::string>() + "\n";
    return s + "assistant: ";
  }
  /// Chat ids with the documents' key order kept (through the template when there is one).
  std::vector<std::int32_t> encode_chat(nlohmann::ordered_json const& messages,
                                        nlohmann::ordered_json const& kwargs) const {
    if (template_src.empty())
      return encode(render_chat(nlohmann::json(messages), nlohmann::json(kwargs)));
    auto opts = kwargs;
    opts["add_generation_prompt"] = true;
    return encode(tf::tokenizer::render_chat<nlohmann::ordered_json>(template_src, messages, opts));
  }
  std::vector<std::int32_t> stop_tokens() const { return {toy_vocab::eos}; }
  std::string model_id() const { return "tf-toy"; }
};

}  // namespace tf::serve
