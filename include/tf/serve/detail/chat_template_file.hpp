#pragma once
/// --chat-template FILE: the template text, read and parsed at start-up so that a template that
/// cannot be read or does not parse stops the start with a message naming the file.
#include <tf/error.hpp>
#include <tf/jinja/template.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tf::serve::detail {

/// The Jinja text of `path`; throws tf::error when it is missing, empty or does not parse.
inline std::string load_chat_template_file(std::filesystem::path const& path) {
  std::ifstream in(path);
  if (!in) throw error("tf: --chat-template {}: cannot read the file", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  auto text = ss.str();
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw error("tf: --chat-template {}: the file is empty", path.string());
  try {
    jinja::template_t const parsed(text);
    (void)parsed;
  } catch (std::exception const& e) {
    throw error("tf: --chat-template {}: the template does not parse: {}", path.string(), e.what());
  }
  return text;
}

}  // namespace tf::serve::detail
