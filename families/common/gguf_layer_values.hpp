#pragma once
/// A per-layer integer of a GGUF's metadata, as llama.cpp's converters write them: an array with
/// one value per layer, or one scalar that holds for every layer.
#include <tf/error.hpp>
#include <tf/model/gguf.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::families {

/// `key`'s array as written, or its scalar repeated `layers` times; throws tf::error naming the
/// `family` GGUF where the key is missing. The caller checks the array's length.
template <class Gguf>
std::vector<std::int64_t> gguf_layer_values(Gguf const& g, std::string const& key, int layers,
                                            std::string_view family) {
  auto const* kv = g.find_kv(key);
  if (!kv) throw error("tf: {} GGUF lacks the metadata key {}", family, key);
  if (kv->type == model::gguf_type::array) return g.get_int_array(key);
  return std::vector<std::int64_t>(static_cast<std::size_t>(layers), *g.get_int(key));
}

}  // namespace tf::families
