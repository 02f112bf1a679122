#pragma once
/// model_file: a GGUF file or a Hugging Face folder, chosen by the path (file -> GGUF, dir -> HF).
#include <tf/error.hpp>
#include <tf/model/gguf.hpp>
#include <tf/model/safetensors.hpp>

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <variant>
#include <vector>

namespace tf::model {

class model_file {
 public:
  /// Opens `path`; `mode` says whether its bytes are mapped or read into memory.
  static model_file open(const std::filesystem::path& path, load_mode mode = load_mode::map) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return model_file(hf_model::open(path, mode));
    if (!std::filesystem::exists(path, ec))
      throw error("tf: model {} does not exist (give a .gguf file or a Hugging Face folder)",
                  path.string());
    return model_file(gguf_file::open(path, mode));
  }

  bool is_gguf() const { return std::holds_alternative<gguf_file>(file_); }
  const gguf_file* gguf() const { return std::get_if<gguf_file>(&file_); }
  const hf_model* hf() const { return std::get_if<hf_model>(&file_); }

  /// general.architecture or config["model_type"].
  std::string_view architecture() const {
    return std::visit([](auto const& f) { return f.architecture(); }, file_);
  }
  const tensor_view* find_tensor(std::string_view name) const {
    return std::visit([&](auto const& f) { return f.find_tensor(name); }, file_);
  }
  const std::vector<tensor_view>& tensors() const {
    return std::visit([](auto const& f) -> const std::vector<tensor_view>& { return f.tensors(); },
                      file_);
  }

 private:
  explicit model_file(gguf_file f) : file_(std::move(f)) {}
  explicit model_file(hf_model f) : file_(std::move(f)) {}

  std::variant<gguf_file, hf_model> file_;
};

/// The bytes a model takes read into memory: the GGUF file, or a folder's .safetensors files.
inline std::uint64_t file_bytes(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path)) return std::filesystem::file_size(path);
  std::uint64_t n = 0;
  for (auto const& e : std::filesystem::directory_iterator(path))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") n += e.file_size();
  return n;
}

}  // namespace tf::model
