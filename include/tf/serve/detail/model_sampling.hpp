#pragma once
/// A model's recommended sampling, where its file carries one: a GGUF's general.sampling.* keys
/// (llama.cpp's names) or a Hugging Face folder's generation_config.json. Keys it leaves out keep
/// llama-server's defaults; a value out of range is skipped with a note.
#include <tf/error.hpp>
#include <tf/model/gguf.hpp>
#include <tf/sample/defaults.hpp>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace tf::serve::detail {

// Takes `v` for `field` when `ok(v)`, else notes why not.
template <class T, class Ok>
void take(sample::sourced<T>& field, std::optional<double> v, std::string const& source, Ok ok,
          std::vector<std::string>& notes) {
  if (!v) return;
  if (!std::isfinite(*v) || !ok(*v)) {
    notes.push_back(fmt::format("{} = {} is out of range: ignored", source, *v));
    return;
  }
  field = {static_cast<T>(*v), source};
}

/// Applies the recommended values found by `lookup(key)` (a number or nothing) for the keys named
/// `names` (temperature, top_k, top_p, min_p, repetition penalty), each sourced as `prefix + key`.
template <class Lookup>
void apply_recommended(sample::sampling_defaults& d, Lookup lookup,
                       std::array<char const*, 5> const& names, std::string const& prefix,
                       std::vector<std::string>& notes) {
  auto src = [&](char const* key) { return prefix + key; };
  take(
      d.temperature, lookup(names[0]), src(names[0]), [](double v) { return v >= 0; }, notes);
  take(
      d.top_k, lookup(names[1]), src(names[1]),
      [](double v) { return v >= 0 && v <= (1 << 20) && v == std::floor(v); }, notes);
  take(
      d.top_p, lookup(names[2]), src(names[2]), [](double v) { return v > 0 && v <= 1; }, notes);
  take(
      d.min_p, lookup(names[3]), src(names[3]), [](double v) { return v >= 0 && v <= 1; }, notes);
  take(
      d.repetition_penalty, lookup(names[4]), src(names[4]),
      [](double v) { return v > 0 && v <= 10; }, notes);
}

/// The recommended sampling of a GGUF's metadata.
inline void from_gguf(sample::sampling_defaults& d, model::gguf_file const& g,
                      std::vector<std::string>& notes) {
  auto lookup = [&](char const* key) -> std::optional<double> {
    try {
      return g.get_float(key);
    } catch (std::exception const& e) {
      notes.push_back(fmt::format("{}: {}: ignored", key, e.what()));
      return std::nullopt;
    }
  };
  apply_recommended(d, lookup,
                    {"general.sampling.temp", "general.sampling.top_k", "general.sampling.top_p",
                     "general.sampling.min_p", "general.sampling.penalty_repeat"},
                    "", notes);
}

/// The recommended sampling of a generation_config.json document.
inline void from_generation_config(sample::sampling_defaults& d, nlohmann::json const& j,
                                   std::vector<std::string>& notes) {
  auto lookup = [&](char const* key) -> std::optional<double> {
    if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number()) {
      notes.push_back(fmt::format("generation_config.json {} is not a number: ignored", key));
      return std::nullopt;
    }
    return j[key].get<double>();
  };
  apply_recommended(d, lookup, {"temperature", "top_k", "top_p", "min_p", "repetition_penalty"},
                    "generation_config.json ", notes);
}

/// The sampling defaults for the model at `path`: llama-server's, with the file's recommendations
/// over them. `notes` collects keys that were present and skipped.
inline sample::sampling_defaults model_sampling_defaults(std::filesystem::path const& path,
                                                         std::vector<std::string>& notes) {
  sample::sampling_defaults d;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    auto const cfg = path / "generation_config.json";
    if (!std::filesystem::exists(cfg, ec)) return d;
    std::ifstream in(cfg);
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) {
      notes.push_back(fmt::format("{} is not valid JSON: ignored", cfg.string()));
      return d;
    }
    from_generation_config(d, j, notes);
    return d;
  }
  from_gguf(d, model::gguf_file::open(path), notes);
  return d;
}

}  // namespace tf::serve::detail
