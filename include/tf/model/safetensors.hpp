#pragma once
/// hf_model: a Hugging Face folder (config.json + *.safetensors, sharded via
/// model.safetensors.index.json), memory-mapped and validated up front; F32, F16 and BF16.
#include <tf/error.hpp>
#include <tf/model/detail/mapped_bytes.hpp>
#include <tf/model/load_mode.hpp>
#include <tf/model/tensor_type.hpp>
#include <tf/model/tensor_view.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tf::model {

namespace detail {

inline nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("tf: cannot read {}", path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw error("tf: {} is not valid JSON: {}", path.string(), e.what());
  }
}

/// The tensor type of a safetensors dtype, or nothing for a dtype tf does not read.
inline std::optional<tensor_type> safetensors_dtype(std::string_view d) {
  if (d == "F32") return tensor_type::f32;
  if (d == "F16") return tensor_type::f16;
  if (d == "BF16") return tensor_type::bf16;
  return std::nullopt;
}

/// Parses one safetensors file's header; appends its tensors (views into `bytes`) to `out`.
inline void parse_safetensors(const mapped_bytes& bytes, const std::string& where,
                              std::vector<tensor_view>& out) {
  if (bytes.size() < 8)
    throw error("tf: {}: at byte 0: expected an 8-byte header length, but the file has {} bytes",
                where, bytes.size());
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8)
    throw error("tf: {}: at byte 0: expected a header length of at most {}, found {}", where,
                bytes.size() - 8, n);
  auto header_text = std::string_view(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    throw error("tf: {}: at byte 8: expected a JSON header of {} bytes: {}", where, n, e.what());
  }
  if (!header.is_object())
    throw error("tf: {}: at byte 8: expected the header to be a JSON object", where);
  std::uint64_t data_start = 8 + n;
  std::uint64_t data_bytes = bytes.size() - data_start;
  struct span_of {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<span_of> spans;
  for (auto const& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    auto const& tensor_name = name;  // clang before 16 cannot capture a structured binding
    auto bad = [&](std::string_view what) {
      return error("tf: {}: tensor \"{}\": expected {}", where, tensor_name, what);
    };
    if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() ||
        !info.contains("shape") || !info["shape"].is_array() || !info.contains("data_offsets") ||
        !info["data_offsets"].is_array() || info["data_offsets"].size() != 2)
      throw bad("an object with dtype (string), shape (array) and data_offsets ([begin, end])");
    auto dtype = info["dtype"].get<std::string>();
    auto type = safetensors_dtype(dtype);
    if (!type)
      throw error("tf: {}: tensor \"{}\" has dtype {}; tf reads F32, F16 and BF16 safetensors",
                  where, name, dtype);
    tensor_view t;
    t.name = name;
    t.type = *type;
    std::uint64_t elems = 1;
    for (auto const& d : info["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0))
        throw bad("non-negative integer dims in shape");
      auto v = d.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          (v != 0 &&
           elems > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / v))
        throw bad("a shape whose element count fits in int64");
      elems *= v;
      t.dims.insert(t.dims.begin(), static_cast<std::int64_t>(v));  // reversed: dims[0] is the row
    }
    if (t.dims.empty()) t.dims.push_back(1);  // a scalar is one element
    auto const& offs = info["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      throw bad("non-negative integer data_offsets");
    auto begin = offs[0].get<std::uint64_t>(), end = offs[1].get<std::uint64_t>();
    if (begin > end || end > data_bytes)
      throw error("tf: {}: tensor \"{}\": expected data_offsets [{}, {}] inside the {} data bytes",
                  where, name, begin, end, data_bytes);
    auto elem_bytes = static_cast<std::uint64_t>(traits_of(t.type).block_bytes);
    if (end - begin != elems * elem_bytes)
      throw error("tf: {}: tensor \"{}\": expected {} bytes for {} {} elements, found {}", where,
                  name, elems * elem_bytes, elems, dtype, end - begin);
    t.bytes = end - begin;
    t.offset = data_start + begin;
    t.data = bytes.data() + t.offset;
    spans.push_back({begin, end, name});
    out.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      throw error("tf: {}: tensor \"{}\" (data bytes {}..{}) overlaps \"{}\" (bytes {}..{})", where,
                  spans[i].name, spans[i].begin, spans[i].end, spans[i - 1].name,
                  spans[i - 1].begin, spans[i - 1].end);
}

}  // namespace detail

class hf_model {
 public:
  /// Opens `dir`: config.json plus model.safetensors.index.json's shards, or every *.safetensors.
  static hf_model open(const std::filesystem::path& dir, load_mode mode = load_mode::map) {
    namespace fs = std::filesystem;
    if (!fs::is_directory(dir)) throw error("tf: {} is not a folder", dir.string());
    hf_model m;
    m.dir_ = dir;
    auto cfg = dir / "config.json";
    if (!fs::exists(cfg))
      throw error("tf: {} has no config.json (a Hugging Face model folder needs one)",
                  dir.string());
    m.config_ = detail::read_json_file(cfg);
    if (!m.config_.is_object()) throw error("tf: {} is not a JSON object", cfg.string());
    if (m.config_.contains("model_type") && m.config_["model_type"].is_string())
      m.architecture_ = m.config_["model_type"].get<std::string>();

    std::vector<std::string> files;
    std::map<std::string, std::string> weight_map;
    auto index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      auto j = detail::read_json_file(index);
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw error("tf: {}: expected an object with a weight_map object", index.string());
      std::set<std::string> unique;
      for (auto const& [name, file] : j["weight_map"].items()) {
        if (!file.is_string())
          throw error("tf: {}: weight_map[\"{}\"] is not a file name", index.string(), name);
        auto f = file.get<std::string>();
        if (f.find('/') != std::string::npos || f == "..")
          throw error("tf: {}: weight_map[\"{}\"] = \"{}\" is outside the folder", index.string(),
                      name, f);
        weight_map[name] = f;
        unique.insert(f);
      }
      files.assign(unique.begin(), unique.end());
    } else {
      for (auto const& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".safetensors")
          files.push_back(e.path().filename().string());
      std::sort(files.begin(), files.end());
    }
    if (files.empty()) throw error("tf: {} holds no .safetensors files", dir.string());

    for (auto const& f : files) {
      auto path = dir / f;
      m.shards_.push_back(detail::mapped_bytes::load(path, mode));
      auto before = m.tensors_.size();
      detail::parse_safetensors(m.shards_.back(), path.string(), m.tensors_);
      m.shard_of_.resize(m.tensors_.size(), m.shards_.size() - 1);
      for (auto i = before; i < m.tensors_.size(); ++i) {
        auto it = weight_map.find(m.tensors_[i].name);
        if (!weight_map.empty() && (it == weight_map.end() || it->second != f))
          throw error("tf: {}: tensor \"{}\" is not mapped to this file by the index",
                      path.string(), m.tensors_[i].name);
      }
    }
    for (std::size_t i = 0; i < m.tensors_.size(); ++i)
      if (!m.index_.emplace(m.tensors_[i].name, i).second)
        throw error("tf: {}: tensor \"{}\" appears in two files", dir.string(), m.tensors_[i].name);
    for (auto const& [name, file] : weight_map)
      if (!m.index_.count(name))
        throw error("tf: {}: the index maps \"{}\" to {}, which does not hold it", dir.string(),
                    name, file);
    return m;
  }

  hf_model(hf_model&&) noexcept = default;
  hf_model& operator=(hf_model&&) noexcept = default;
  hf_model(const hf_model&) = delete;
  hf_model& operator=(const hf_model&) = delete;

  const nlohmann::json& config() const { return config_; }
  /// config["model_type"], or empty.
  std::string_view architecture() const { return architecture_; }
  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<tensor_view>& tensors() const { return tensors_; }
  const tensor_view* find_tensor(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  /// Which shard file (index into shard order) holds tensor `i`.
  std::size_t shard_of(std::size_t i) const { return shard_of_.at(i); }
  std::size_t shard_count() const { return shards_.size(); }

 private:
  hf_model() = default;

  std::filesystem::path dir_;
  nlohmann::json config_;
  std::string architecture_;
  std::vector<detail::mapped_bytes> shards_;
  std::vector<tensor_view> tensors_;
  std::vector<std::size_t> shard_of_;
  std::unordered_map<std::string_view, std::size_t> index_;
};

}  // namespace tf::model
