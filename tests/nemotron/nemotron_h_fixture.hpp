#pragma once
// What the Nemotron-H tests share: the fixture folders, one stream over an engine with a state
// slot, and a GGUF whose metadata a test edits (a key dropped, a per-layer array replaced).
#include <tests/common/hf_oracle.hpp>
#include <tf/batch.hpp>
#include <tf/model/gguf.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf::test {

/// fixtures/nemotron/<name>: tiny_h (nemotron_h) or tiny_h_moe (nemotron_h_moe).
inline std::string nemotron_fixture(char const* name) {
  return std::string(TF_FIXTURES_DIR) + "/nemotron/" + name;
}

/// One stream over an engine with recurrent state: its page table and its state slot.
template <class Engine>
struct slot_stream {
  Engine& fwd;
  std::vector<std::int32_t> pages;
  std::int32_t slot = 0;
  std::int32_t pos = 0;

  slot_stream(Engine& f, std::vector<std::int32_t> p, std::int32_t s)
      : fwd(f), pages(std::move(p)), slot(s) {}
  explicit slot_stream(Engine& f) : slot_stream(f, pages_in_order(f.kv().num_pages), 0) {}

  /// The row for `toks` at the stream's position (the stream moves on past them).
  batch_row row(std::span<std::int32_t const> toks, bool all) {
    batch_row r{toks, pos, pages, all, slot};
    pos += static_cast<std::int32_t>(toks.size());
    return r;
  }

  std::vector<float> feed(std::span<std::int32_t const> toks, bool all) {
    auto const r = row(toks, all);
    std::vector<float> out(static_cast<std::size_t>(logits_rows({&r, 1}) * fwd.vocab_size()));
    fwd.forward({&r, 1}, out.data());
    return out;
  }

  /// The last logits of `toks` fed in chunks of `chunk`.
  std::vector<float> feed_chunks(std::span<std::int32_t const> toks, std::size_t chunk) {
    std::vector<float> last;
    for (std::size_t i = 0; i < toks.size(); i += chunk)
      last = feed(toks.subspan(i, std::min(chunk, toks.size() - i)), false);
    return last;
  }

  std::vector<std::int32_t> greedy(std::span<float const> logits, std::size_t n) {
    auto const vocab = static_cast<int>(fwd.vocab_size());
    return greedy_tokens(last_row(logits, vocab), n, [this](std::int32_t t) {
      return feed({&t, 1}, false);
    });
  }
};

/// A GGUF's metadata with edits: keys dropped, integer arrays replaced.
struct gguf_edit {
  model::gguf_file const* g;
  std::set<std::string, std::less<>> dropped;
  std::map<std::string, std::vector<std::int64_t>, std::less<>> arrays;

  std::string_view architecture() const { return g->architecture(); }
  model::gguf_kv const* find_kv(std::string_view k) const {
    if (dropped.contains(k)) return nullptr;
    if (arrays.contains(k)) return &array_kv;
    return g->find_kv(k);
  }
  std::optional<std::int64_t> get_int(std::string_view k) const {
    return dropped.contains(k) ? std::nullopt : g->get_int(k);
  }
  std::optional<double> get_float(std::string_view k) const {
    return dropped.contains(k) ? std::nullopt : g->get_float(k);
  }
  std::optional<bool> get_bool(std::string_view k) const {
    return dropped.contains(k) ? std::nullopt : g->get_bool(k);
  }
  std::vector<std::int64_t> get_int_array(std::string_view k) const {
    if (auto it = arrays.find(k); it != arrays.end()) return it->second;
    return dropped.contains(k) ? std::vector<std::int64_t>{} : g->get_int_array(k);
  }
  auto const* find_tensor(std::string_view n) const { return g->find_tensor(n); }

  model::gguf_kv array_kv{{}, model::gguf_type::array, model::gguf_type::i32, 0, 0};
};

}  // namespace tf::test
