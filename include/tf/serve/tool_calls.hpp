#pragma once
/// Tool calls in a model's reply: which format a chat template teaches, and one call's text
/// (what lies between the format's start and end tags) -> {name, arguments as a JSON string}.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tf::serve {

/// The reply formats tf parses.
enum class tool_format {
  none,          // the template teaches no call format: tools are offered, replies stay content
  json_in_tags,  // Qwen3 / Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
  xml_function,  // Qwen3.5, Nemotron-H: <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>
  glm45,        // GLM-4.5: <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value></tool_call>
  call_braces,  // Gemma 4: <|tool_call>call:f{k:<|"|>text<|"|>,n:3}<tool_call|>
  generic_json,  // no format taught: llama-server's fallback, the whole reply one JSON object
};

inline char const* to_string(tool_format f) {
  switch (f) {
    case tool_format::json_in_tags:
      return "json_in_tags";
    case tool_format::xml_function:
      return "xml_function";
    case tool_format::glm45:
      return "glm45";
    case tool_format::call_braces:
      return "call_braces";
    case tool_format::generic_json:
      return "generic_json";
    default:
      return "none";
  }
}

/// The format a chat template's text teaches the model (none: it teaches none).
inline tool_format detect_tool_format(std::string_view tmpl) {
  auto has = [&](std::string_view s) { return tmpl.find(s) != std::string_view::npos; };
  if (has("<|tool_call>call:")) return tool_format::call_braces;
  if (!has("<tool_call>")) return tool_format::none;
  if (has("<arg_key>")) return tool_format::glm45;
  if (has("<function=") && has("<parameter=")) return tool_format::xml_function;
  if (has("arguments")) return tool_format::json_in_tags;
  return tool_format::none;
}

inline constexpr std::string_view tool_call_open = "<tool_call>";
inline constexpr std::string_view tool_call_close = "</tool_call>";

/// The tags around one call in a reply, per format (generic_json has none: the reply is the call).
struct tool_call_tags {
  std::string_view open, close;
};
inline tool_call_tags call_tags(tool_format f) {
  if (f == tool_format::call_braces) return {"<|tool_call>", "<tool_call|>"};
  return {tool_call_open, tool_call_close};
}

/// One parsed call: the function's name and its arguments as JSON text (OpenAI's shape).
struct parsed_tool_call {
  std::string name, arguments;
};

namespace detail {

// JSON text of a value built from a reply's raw text: invalid UTF-8 becomes U+FFFD rather than
// throwing.
inline std::string json_text(nlohmann::ordered_json const& v) {
  return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

inline std::string_view trim_ws(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The JSON schema type of parameter `key` of tool `name` in `tools`, or "" when not declared.
inline std::string param_type(nlohmann::ordered_json const& tools, std::string const& name,
                              std::string const& key) {
  if (!tools.is_array()) return {};
  for (auto const& t : tools) {
    auto const& f = t.contains("function") ? t["function"] : t;
    if (!f.is_object() || f.value("name", std::string()) != name) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) return {};
    auto const& p = f["parameters"];
    if (!p.contains("properties") || !p["properties"].contains(key)) return {};
    auto const& s = p["properties"][key];
    if (s.is_object() && s.contains("type") && s["type"].is_string())
      return s["type"].get<std::string>();
    return {};
  }
  return {};
}

// A parameter written as text (the XML formats) -> its JSON value, by the schema's type: strings
// stay text; other types parse as JSON (Python's True/False/None too); text that does not parse
// stays a string.
inline nlohmann::ordered_json param_value(std::string_view text, std::string const& type) {
  std::string const s(text);
  if (type == "string") return s;
  if (type == "boolean" || type.empty()) {
    if (s == "True" || s == "true") return true;
    if (s == "False" || s == "false") return false;
  }
  if (s == "None" && type != "string") return nullptr;
  auto v = nlohmann::ordered_json::parse(s, nullptr, false);
  if (v.is_discarded()) return s;
  if (type.empty() && !v.is_object() && !v.is_array() && !v.is_number()) return s;
  return v;
}

inline std::optional<parsed_tool_call> parse_json_call(std::string_view body) {
  auto v = nlohmann::ordered_json::parse(trim_ws(body), nullptr, false);
  if (v.is_discarded() || !v.is_object() || !v.contains("name") || !v["name"].is_string())
    return std::nullopt;
  parsed_tool_call c{v["name"].get<std::string>(), "{}"};
  auto const key = v.contains("arguments") ? "arguments" : "parameters";
  if (v.contains(key)) {
    auto const& a = v[key];
    if (a.is_string()) {
      c.arguments = a.get<std::string>();
    } else if (a.is_object()) {
      c.arguments = json_text(a);
    } else if (!a.is_null()) {
      return std::nullopt;
    }
  }
  return c;
}

// <function=NAME>\n<parameter=K>\nV\n</parameter>...\n</function>
inline std::optional<parsed_tool_call> parse_xml_call(std::string_view body,
                                                      nlohmann::ordered_json const& tools) {
  auto s = trim_ws(body);
  constexpr std::string_view fopen = "<function=";
  if (!s.starts_with(fopen)) return std::nullopt;
  auto gt = s.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  parsed_tool_call c{std::string(trim_ws(s.substr(fopen.size(), gt - fopen.size()))), {}};
  if (c.name.empty()) return std::nullopt;
  auto rest = s.substr(gt + 1);
  auto fend = rest.rfind("</function>");
  if (fend != std::string_view::npos) {
    if (!trim_ws(rest.substr(fend + 11)).empty()) return std::nullopt;
    rest = rest.substr(0, fend);
  }
  auto args = nlohmann::ordered_json::object();
  constexpr std::string_view popen = "<parameter=", pclose = "</parameter>";
  while (!trim_ws(rest).empty()) {
    rest = rest.substr(rest.find_first_not_of(" \t\r\n"));
    if (!rest.starts_with(popen)) return std::nullopt;
    auto pgt = rest.find('>');
    if (pgt == std::string_view::npos) return std::nullopt;
    std::string key(trim_ws(rest.substr(popen.size(), pgt - popen.size())));
    auto after = rest.substr(pgt + 1);
    auto end = after.find(pclose);
    if (end == std::string_view::npos) return std::nullopt;
    auto text = after.substr(0, end);
    if (text.starts_with('\n')) text.remove_prefix(1);
    if (text.ends_with('\n')) text.remove_suffix(1);
    args[key] = param_value(text, param_type(tools, c.name, key));
    rest = after.substr(end + pclose.size());
  }
  c.arguments = json_text(args);
  return c;
}

// NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...
inline std::optional<parsed_tool_call> parse_glm45_call(std::string_view body,
                                                        nlohmann::ordered_json const& tools) {
  auto s = trim_ws(body);
  auto k0 = s.find("<arg_key>");
  parsed_tool_call c{std::string(trim_ws(s.substr(0, k0))), {}};
  if (c.name.empty() || c.name.find_first_of("<>\n") != std::string::npos) return std::nullopt;
  auto args = nlohmann::ordered_json::object();
  auto rest = k0 == std::string_view::npos ? std::string_view() : s.substr(k0);
  constexpr std::string_view ko = "<arg_key>", kc = "</arg_key>", vo = "<arg_value>",
                             vc = "</arg_value>";
  while (!trim_ws(rest).empty()) {
    rest = rest.substr(rest.find_first_not_of(" \t\r\n"));
    if (!rest.starts_with(ko)) return std::nullopt;
    auto ke = rest.find(kc);
    if (ke == std::string_view::npos) return std::nullopt;
    std::string key(trim_ws(rest.substr(ko.size(), ke - ko.size())));
    rest = rest.substr(ke + kc.size());
    rest = rest.substr(std::min(rest.size(), rest.find_first_not_of(" \t\r\n")));
    if (!rest.starts_with(vo)) return std::nullopt;
    auto ve = rest.find(vc);
    if (ve == std::string_view::npos) return std::nullopt;
    args[key] = param_value(rest.substr(vo.size(), ve - vo.size()), param_type(tools, c.name, key));
    rest = rest.substr(ve + vc.size());
  }
  c.arguments = json_text(args);
  return c;
}

// Gemma 4's argument syntax: JSON with bare keys and strings between <|"|> marks (its template's
// format_argument); a value that does not parse gives nullopt.
class braced_reader {
 public:
  explicit braced_reader(std::string_view s) : s_(s) {}

  std::optional<nlohmann::ordered_json> value() {
    skip_ws();
    if (at(quote)) {
      auto const end = s_.find(quote, i_ + quote.size());
      if (end == std::string_view::npos) return std::nullopt;
      std::string text(s_.substr(i_ + quote.size(), end - i_ - quote.size()));
      i_ = end + quote.size();
      return nlohmann::ordered_json(std::move(text));
    }
    if (at("{") || at("[")) {
      if (++depth_ > max_depth) return std::nullopt;  // a reply cannot nest without bound
      auto v = at("{") ? object() : array();
      --depth_;
      return v;
    }
    auto const end = s_.find_first_of(",}]", i_);
    auto const word = trim_ws(s_.substr(i_, end == std::string_view::npos ? s_.npos : end - i_));
    auto v = nlohmann::ordered_json::parse(word, nullptr, false);
    if (word.empty() || v.is_discarded() || v.is_object() || v.is_array() || v.is_string())
      return std::nullopt;
    i_ = end == std::string_view::npos ? s_.size() : end;
    return v;
  }

  std::optional<nlohmann::ordered_json> object() {
    ++i_;  // {
    auto out = nlohmann::ordered_json::object();
    skip_ws();
    if (at("}")) return ++i_, out;
    for (;;) {
      skip_ws();
      std::string key;
      if (at(quote)) {  // a quoted key, as the template writes a nested mapping's keys
        auto k = value();
        if (!k) return std::nullopt;
        key = k->get<std::string>();
      } else {
        auto const colon = s_.find_first_of(":}", i_);
        if (colon == std::string_view::npos || s_[colon] != ':') return std::nullopt;
        key = std::string(trim_ws(s_.substr(i_, colon - i_)));
        i_ = colon;
      }
      skip_ws();
      if (key.empty() || !at(":")) return std::nullopt;
      ++i_;
      auto v = value();
      if (!v) return std::nullopt;
      out[key] = std::move(*v);
      skip_ws();
      if (at("}")) return ++i_, out;
      if (!at(",")) return std::nullopt;
      ++i_;
    }
  }

  std::optional<nlohmann::ordered_json> array() {
    ++i_;  // [
    auto out = nlohmann::ordered_json::array();
    skip_ws();
    if (at("]")) return ++i_, out;
    for (;;) {
      auto v = value();
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      skip_ws();
      if (at("]")) return ++i_, out;
      if (!at(",")) return std::nullopt;
      ++i_;
    }
  }

  bool done() {
    skip_ws();
    return i_ == s_.size();
  }

 private:
  static constexpr std::string_view quote = "<|\"|>";
  bool at(std::string_view t) const { return s_.substr(i_).starts_with(t); }
  void skip_ws() {
    while (i_ < s_.size() && std::string_view(" \t\r\n").find(s_[i_]) != std::string_view::npos)
      ++i_;
  }
  static constexpr int max_depth = 64;
  std::string_view s_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

// call:NAME{args}
inline std::optional<parsed_tool_call> parse_braced_call(std::string_view body) {
  auto s = trim_ws(body);
  constexpr std::string_view call = "call:";
  if (!s.starts_with(call)) return std::nullopt;
  auto const brace = s.find('{');
  if (brace == std::string_view::npos) return std::nullopt;
  parsed_tool_call c{std::string(trim_ws(s.substr(call.size(), brace - call.size()))), {}};
  if (c.name.empty() || c.name.find_first_of(" \t\n{}<>:") != std::string::npos)
    return std::nullopt;
  braced_reader r(s.substr(brace));
  auto args = r.object();
  if (!args || !r.done()) return std::nullopt;
  c.arguments = json_text(*args);
  return c;
}

// {"tool_call": {"name", "arguments"}} (the generic fallback's reply); a "response" reply is
// content, not a call.
inline std::optional<parsed_tool_call> parse_generic_call(std::string_view body) {
  auto v = nlohmann::ordered_json::parse(trim_ws(body), nullptr, false);
  if (v.is_discarded() || !v.is_object() || !v.contains("tool_call")) return std::nullopt;
  return parse_json_call(json_text(v["tool_call"]));
}

}  // namespace detail

/// One call's text (between <tool_call> and </tool_call>) in format `f`; nullopt when malformed.
/// `tools` (the request's) gives parameter types for the formats that write values as text.
inline std::optional<parsed_tool_call> parse_tool_call(
    tool_format f, std::string_view body,
    nlohmann::ordered_json const& tools = nlohmann::ordered_json()) {
  switch (f) {
    case tool_format::json_in_tags:
      return detail::parse_json_call(body);
    case tool_format::xml_function:
      return detail::parse_xml_call(body, tools);
    case tool_format::glm45:
      return detail::parse_glm45_call(body, tools);
    case tool_format::call_braces:
      return detail::parse_braced_call(body);
    case tool_format::generic_json:
      return detail::parse_generic_call(body);
    default:
      return std::nullopt;
  }
}

}  // namespace tf::serve
