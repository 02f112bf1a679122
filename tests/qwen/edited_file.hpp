#pragma once
// A model file seen with some tensors hidden and others added: what a loader test feeds a loader
// to see it name a missing tensor, or read a layout the fixture's files do not hold.
#include <tf/model/model_file.hpp>
#include <tf/model/tensor_view.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::test {

/// `inner` without the tensors named in `hidden`, with those of `extra` (their bytes in `bytes`).
struct edited_file {
  model::model_file const& inner;
  std::vector<std::string> hidden;
  std::map<std::string, model::tensor_view, std::less<>> extra;
  std::deque<std::vector<std::byte>> bytes;  // a deque: adding one keeps the others in place

  model::tensor_view const* find_tensor(std::string_view n) const {
    if (std::find(hidden.begin(), hidden.end(), n) != hidden.end()) return nullptr;
    auto it = extra.find(n);
    return it != extra.end() ? &it->second : inner.find_tensor(n);
  }

  /// Adds the F32 tensor `name` of `dims` holding `data`.
  void add_f32(std::string const& name, std::vector<std::int64_t> dims,
               std::vector<std::byte> data) {
    auto const& b = bytes.emplace_back(std::move(data));
    auto& v = extra[name];
    v.name = name;
    v.type = model::tensor_type::f32;
    v.dims = std::move(dims);
    v.data = b.data();
    v.bytes = b.size();
  }
};

}  // namespace tf::test
