#pragma once
// What the Nemotron-H tests share: the fixture folders, and a GGUF whose metadata a test edits (a
// key dropped, a per-layer array replaced).
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
