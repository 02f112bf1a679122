// tf-inspect MODEL: architecture, hyper-parameters, tensor types and sizes, tokenizer summary.
#include <tf/model/default_model.hpp>
#include <tf/model/model_file.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <optional>
#include <string>

namespace {

std::string human_bytes(std::uint64_t b) {
  if (b >= (std::uint64_t{1} << 30))
    return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (std::uint64_t{1} << 20))
    return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.2f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}

std::string dims_text(const tf::model::tensor_view& t) {
  std::string out = "[";
  for (std::size_t i = 0; i < t.dims.size(); ++i)
    out += fmt::format("{}{}", i ? ", " : "", t.dims[i]);
  return out + "]";
}

void print_tensors(const std::vector<tf::model::tensor_view>& tensors, bool each) {
  std::map<std::string_view, std::pair<std::size_t, std::uint64_t>> by_type;
  std::uint64_t total = 0;
  for (auto const& t : tensors) {
    auto& row = by_type[tf::model::traits_of(t.type).name];
    ++row.first;
    row.second += t.bytes;
    total += t.bytes;
  }
  fmt::print("tensors: {} ({} total)\n", tensors.size(), human_bytes(total));
  fmt::print("  {:<6} {:>6} {:>12}\n", "type", "count", "size");
  for (auto const& [name, row] : by_type)
    fmt::print("  {:<6} {:>6} {:>12}\n", name, row.first, human_bytes(row.second));
  if (!each) return;
  fmt::print("tensor list:\n");
  for (auto const& t : tensors)
    fmt::print("  {:<48} {:<5} {:<20} {:>12} @ {}\n", t.name, tf::model::traits_of(t.type).name,
               dims_text(t), t.bytes, t.offset);
}

void inspect_gguf(const tf::model::gguf_file& g, bool each, bool all_metadata) {
  fmt::print("format: GGUF v{} (alignment {}, tensor data from byte {}, {} metadata keys)\n",
             g.version(), g.alignment(), g.data_offset(), g.metadata().size());
  auto arch = g.architecture();
  fmt::print("architecture: {}\n", arch.empty() ? "(none)" : arch);
  if (auto name = g.get_string("general.name")) fmt::print("name: {}\n", *name);
  fmt::print("hyper-parameters:\n");
  std::string prefix = std::string(arch) + ".";
  for (auto const& kv : g.metadata())
    if (!arch.empty() && kv.key.starts_with(prefix))
      fmt::print("  {} = {}\n", kv.key, g.render(kv));
  if (all_metadata) {
    fmt::print("metadata:\n");
    for (auto const& kv : g.metadata())
      fmt::print("  {} ({}) = {}\n", kv.key, tf::model::gguf_type_name(kv.type), g.render(kv));
  }
  print_tensors(g.tensors(), each);
  auto opt = [](std::optional<std::int64_t> v) {
    return v ? std::to_string(*v) : std::string("-");
  };
  auto model = g.get_string("tokenizer.ggml.model");
  std::size_t vocab = 0;
  if (auto kv = g.find_kv("tokenizer.ggml.tokens")) vocab = static_cast<std::size_t>(kv->count);
  fmt::print("tokenizer: model {}, pre {}, vocab {}, bos {}, eos {}, chat template {}\n",
             model ? *model : "(none)", g.get_string("tokenizer.ggml.pre").value_or("-"), vocab,
             opt(g.get_int("tokenizer.ggml.bos_token_id")),
             opt(g.get_int("tokenizer.ggml.eos_token_id")),
             g.has("tokenizer.chat_template") ? "present" : "absent");
}

void inspect_hf(const tf::model::hf_model& h, bool each) {
  fmt::print("format: Hugging Face folder ({} safetensors file{})\n", h.shard_count(),
             h.shard_count() == 1 ? "" : "s");
  fmt::print("architecture: {}\n", h.architecture().empty() ? "(none)" : h.architecture());
  fmt::print("config.json:\n");
  for (auto const& [key, value] : h.config().items()) {
    auto text = value.dump();
    if (text.size() > 80) text = text.substr(0, 77) + "...";
    fmt::print("  {} = {}\n", key, text);
  }
  print_tensors(h.tensors(), each);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tf-inspect: what a model file holds (GGUF file or Hugging Face folder)"};
  std::string model;
  bool each = false, all_metadata = false;
  app.add_option("model", model, "GGUF file or HF folder (default: TF_MODEL or the default model)");
  app.add_flag("--tensors", each, "list every tensor (name, type, dims, bytes, offset)");
  app.add_flag("--metadata", all_metadata, "list every GGUF metadata key");
  CLI11_PARSE(app, argc, argv);
  try {
    auto path = tf::model::resolve_model_path(model.empty() ? std::nullopt
                                                            : std::optional<std::string>(model));
    auto m = tf::model::model_file::open(path);
    fmt::print("model: {}\n", path.string());
    if (m.is_gguf())
      inspect_gguf(*m.gguf(), each, all_metadata);
    else
      inspect_hf(*m.hf(), each);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf-inspect: %s\n", e.what());
    return 1;
  }
  return 0;
}
