#pragma once
/// tf::jinja attribute and item access, and the Python str/dict methods templates call.
#include <tf/error.hpp>
#include <tf/jinja/value.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::jinja {

namespace detail {

/// Argument i (or keyword `name`), else `def`; returned by value so defaults may be temporaries.
inline value arg(call_args& a, size_t i, std::string_view name, const value& def) {
  if (i < a.pos.size()) return a.pos[i];
  for (auto& [k, v] : a.kw)
    if (k == name) return v;
  return def;
}

inline std::string need_string(const value& v, std::string_view what) {
  if (v.is_string()) return v.as_string();
  throw tf::error("jinja: {} expects a string, got {}", what, v.type_name());
}

inline bool is_py_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

inline std::string strip(std::string_view s, const value& chars, bool left, bool right) {
  if (!chars.is_none() && !chars.is_undefined() && !chars.is_string())
    throw tf::error("jinja: strip() chars must be a string, got {}", chars.type_name());
  charge(1 + s.size() / 64);
  auto in_set = [&](char c) {
    if (chars.is_none() || chars.is_undefined()) return is_py_space(c);
    return chars.as_string().find(c) != std::string::npos;
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && in_set(s[b])) ++b;
  if (right)
    while (e > b && in_set(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

inline list_t split(const std::string& s, const value& sep, std::int64_t maxsplit,
                    bool from_right) {
  list_t out;
  charge(1 + s.size() / 16);
  if (sep.is_none() || sep.is_undefined()) {
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < s.size();) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      while (j < s.size() && !is_py_space(s[j])) ++j;
      words.emplace_back(i, j);
      check_items(words.size());
      i = j;
    }
    if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) > maxsplit + 1) {
      if (from_right) {
        size_t keep = words.size() - static_cast<size_t>(maxsplit);
        std::string head = strip(s.substr(0, words[keep - 1].second), value(none_t{}), true, false);
        out.emplace_back(head);
        for (size_t k = keep; k < words.size(); ++k)
          out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
      } else {
        for (size_t k = 0; k < static_cast<size_t>(maxsplit); ++k)
          out.emplace_back(s.substr(words[k].first, words[k].second - words[k].first));
        out.emplace_back(strip(s.substr(words[static_cast<size_t>(maxsplit)].first),
                               value(none_t{}), false, true));
      }
      return out;
    }
    for (auto [b, e] : words) out.emplace_back(s.substr(b, e - b));
    return out;
  }
  std::string d = need_string(sep, "split separator");
  if (d.empty()) throw tf::error("jinja: split() got an empty separator");
  charge_search(s.size(), d.size());
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t p = s.find(d, start);
    if (p == std::string::npos) break;
    parts.push_back(s.substr(start, p - start));
    check_items(parts.size());
    start = p + d.size();
  }
  parts.push_back(s.substr(start));
  if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) > maxsplit + 1) {
    size_t m = static_cast<size_t>(maxsplit);
    std::vector<std::string> merged;
    if (from_right) {
      std::string head;
      size_t nhead = parts.size() - m;
      for (size_t k = 0; k < nhead; ++k) head += (k ? d : "") + parts[k];
      merged.push_back(head);
      for (size_t k = nhead; k < parts.size(); ++k) merged.push_back(parts[k]);
    } else {
      for (size_t k = 0; k < m; ++k) merged.push_back(parts[k]);
      std::string tail;
      for (size_t k = m; k < parts.size(); ++k) tail += (k > m ? d : "") + parts[k];
      merged.push_back(tail);
    }
    parts = std::move(merged);
  }
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

inline std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                               std::int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends)
    auto cps = code_points(s);
    std::int64_t n = 0;
    for (auto& c : cps) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      out += c;
      charge(1 + to.size() / 64);
      check_bytes(out.size());
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  charge_search(s.size(), from.size());
  size_t start = 0;
  std::int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(from, start);
    if (p == std::string::npos) break;
    out += s.substr(start, p - start) + to;
    charge(1 + to.size() / 64);
    check_bytes(out.size());
    start = p + from.size();
    ++n;
  }
  return out + s.substr(start);
}

inline std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// Upper-cases ASCII letters and the common Latin-1 letters (2-byte UTF-8 U+00E0..U+00FE).
inline std::string upper(std::string s) {
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      s[i] = static_cast<char>(std::toupper(c));
    } else if (c == 0xC3 && i + 1 < s.size()) {
      auto d = static_cast<unsigned char>(s[i + 1]);
      if (d >= 0xA0 && d <= 0xBE && d != 0xB7) s[i + 1] = static_cast<char>(d - 0x20);
      ++i;
    }
  }
  return s;
}

/// Python str.title(): upper-case after a non-letter, lower-case otherwise.
inline std::string py_title(const std::string& s) {
  std::string out;
  bool prev_alpha = false;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    bool alpha = std::isalpha(c) != 0;
    out += static_cast<char>(alpha ? (prev_alpha ? std::tolower(c) : std::toupper(c)) : c);
    prev_alpha = alpha;
  }
  return out;
}

inline std::string capitalize(const std::string& s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

inline bool prefix_match(const std::string& s, const value& p, bool suffix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0
                  : s.compare(0, x.size(), x) == 0;
  };
  if (p.is_list()) {
    for (const auto& e : p.as_list())
      if (one(need_string(e, suffix ? "endswith" : "startswith"))) return true;
    return false;
  }
  return one(need_string(p, suffix ? "endswith" : "startswith"));
}

inline std::int64_t to_cp_index(const std::string& s, size_t byte) {
  return utf8_length(std::string_view(s).substr(0, byte));
}

// str.format with {} / {0} / {name} fields (no format specs).
inline std::string py_format(const std::string& f, call_args& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t e = f.find('}', i);
      if (e == std::string::npos) throw tf::error("jinja: format(): unmatched '{{'");
      std::string field = f.substr(i + 1, e - i - 1);
      const value* v = nullptr;
      if (field.empty()) {
        if (auto_idx >= a.pos.size()) throw tf::error("jinja: format(): too few arguments");
        v = &a.pos[auto_idx++];
      } else if (field.size() <= 9 && std::all_of(field.begin(), field.end(), [](char d) {
                   return std::isdigit(static_cast<unsigned char>(d));
                 })) {
        size_t k = std::stoul(field);
        if (k >= a.pos.size()) throw tf::error("jinja: format(): index {} out of range", k);
        v = &a.pos[k];
      } else {
        for (auto& [k, x] : a.kw)
          if (k == field) v = &x;
        if (!v) throw tf::error("jinja: format(): no argument named '{}'", field);
      }
      out += to_string(*v);
      charge(1 + (v->is_string() ? v->as_string().size() / 64 : 0));
      check_bytes(out.size());
      i = e;
    } else {
      out += c;
    }
  }
  return out;
}

inline value string_method(const std::string& s, const std::string& name) {
  charge(1 + s.size() / 32);  // the bound method holds copies of s
  auto m = [](auto fn) { return value(function(fn)); };
  const value none{none_t{}};
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return m([s, l, r](call_args& a) {
      return value(strip(s, arg(a, 0, "chars", value(none_t{})), l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return m([s, right](call_args& a) {
      const value& sep = arg(a, 0, "sep", value(none_t{}));
      const value& ms = arg(a, 1, "maxsplit", value(std::int64_t{-1}));
      return value(split(s, sep, ms.is_int() ? ms.as_int() : -1, right));
    });
  }
  if (name == "splitlines") {
    return m([s](call_args&) {
      list_t out;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          out.emplace_back(s.substr(start, i - start));
          check_items(out.size());
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) out.emplace_back(s.substr(start));
      return value(std::move(out));
    });
  }
  if (name == "replace") {
    return m([s](call_args& a) {
      const value& c = arg(a, 2, "count", value(std::int64_t{-1}));
      return value(replace_all(s, need_string(arg(a, 0, "old", value()), "replace"),
                               need_string(arg(a, 1, "new", value()), "replace"),
                               c.is_int() ? c.as_int() : -1));
    });
  }
  if (name == "upper") return m([s](call_args&) { return value(upper(s)); });
  if (name == "lower") return m([s](call_args&) { return value(lower(s)); });
  if (name == "title") return m([s](call_args&) { return value(py_title(s)); });
  if (name == "capitalize") return m([s](call_args&) { return value(capitalize(s)); });
  if (name == "startswith" || name == "endswith") {
    bool suf = name == "endswith";
    return m([s, suf](call_args& a) {
      return value(prefix_match(s, arg(a, 0, "prefix", value()), suf));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    return m([s, name](call_args& a) {
      std::string sub = need_string(arg(a, 0, "sub", value()), name);
      charge_search(s.size(), sub.size());
      if (name == "count") {
        if (sub.empty()) return value(utf8_length(s) + 1);
        std::int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return value(n);
      }
      size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") throw tf::error("jinja: str.index(): substring not found");
        return value(std::int64_t{-1});
      }
      return value(to_cp_index(s, p));
    });
  }
  if (name == "format") return m([s](call_args& a) { return value(py_format(s, a)); });
  if (name == "join") {
    return m([s](call_args& a) {
      const value& l = arg(a, 0, "iterable", value());
      if (!l.is_list()) throw tf::error("jinja: str.join() expects a list");
      std::string out;
      bool first = true;
      for (const auto& e : l.as_list()) {
        if (!first) out += s;
        first = false;
        out += need_string(e, "str.join item");
        charge(1 + (s.size() + e.as_string().size()) / 64);
        check_bytes(out.size());
      }
      return value(out);
    });
  }
  auto cls = [&](auto pred) {
    return m([s, pred](call_args&) {
      if (s.empty()) return value(false);
      for (char c : s)
        if (!pred(static_cast<unsigned char>(c))) return value(false);
      return value(true);
    });
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return cls([](unsigned char c) { return std::isdigit(c) != 0; });
  if (name == "isalpha") return cls([](unsigned char c) { return std::isalpha(c) != 0; });
  if (name == "isalnum") return cls([](unsigned char c) { return std::isalnum(c) != 0; });
  if (name == "isspace")
    return cls([](unsigned char c) { return is_py_space(static_cast<char>(c)); });
  if (name == "isupper" || name == "islower") {
    bool up = name == "isupper";
    return m([s, up](call_args&) {
      bool cased = false;
      for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        if (std::isalpha(c)) {
          cased = true;
          if ((std::isupper(c) != 0) != up) return value(false);
        }
      }
      return value(cased);
    });
  }
  (void)none;
  return value::make_undefined(name);
}

inline value dict_method(const value& d, const std::string& name) {
  if (name == "items") {
    return value(function([d](call_args&) {
      list_t out;
      for (const auto& [k, v] : d.as_dict()) out.emplace_back(list_t{value(k), v}, true);
      return value(std::move(out));
    }));
  }
  if (name == "keys") {
    return value(function([d](call_args&) {
      list_t out;
      for (const auto& kv : d.as_dict()) out.emplace_back(kv.first);
      return value(std::move(out));
    }));
  }
  if (name == "values") {
    return value(function([d](call_args&) {
      list_t out;
      for (const auto& kv : d.as_dict()) out.push_back(kv.second);
      return value(std::move(out));
    }));
  }
  if (name == "get") {
    return value(function([d](call_args& a) {
      const value& k = arg(a, 0, "key", value());
      if (k.is_string())
        if (const value* v = d.find(k.as_string())) return *v;
      return arg(a, 1, "default", value(none_t{}));
    }));
  }
  return value::make_undefined(name);
}

inline bool is_mutating_method(const std::string& n) {
  return n == "append" || n == "pop" || n == "extend" || n == "insert" || n == "remove" ||
         n == "clear" || n == "update" || n == "setdefault" || n == "popitem" || n == "sort" ||
         n == "reverse";
}

}  // namespace detail

/// obj[key] (Python semantics; a missing key or index gives undefined).
inline value get_item(const value& obj, const value& key) {
  if (obj.is_undefined())
    throw tf::error("jinja: '{}' is undefined (item access)", obj.undefined_name());
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const value* v = obj.find(key.as_string())) return *v;
      if (!obj.is_namespace()) return detail::dict_method(obj, key.as_string());
    }
    return value::make_undefined(to_string(key));
  }
  if (obj.is_list() || obj.is_string()) {
    if (!key.is_int() && !key.is_bool()) {
      if (key.is_string() && obj.is_string())
        return detail::string_method(obj.as_string(), key.as_string());
      return value::make_undefined(to_string(key));
    }
    std::int64_t i = key.is_bool() ? std::int64_t{key.as_bool()} : key.as_int();
    if (obj.is_list()) {
      auto n = static_cast<std::int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return value::make_undefined(to_string(key));
      return obj.as_list()[static_cast<size_t>(i)];
    }
    const std::string& str = obj.as_string();
    auto starts = detail::cp_starts(str);
    auto n = static_cast<std::int64_t>(starts.size() - 1);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return value::make_undefined(to_string(key));
    auto k = static_cast<size_t>(i);
    return value(str.substr(starts[k], starts[k + 1] - starts[k]));
  }
  return value::make_undefined(to_string(key));
}

/// obj.name: methods first (like Python getattr), then dict keys.
inline value get_attr(const value& obj, const std::string& name) {
  if (obj.is_undefined())
    throw tf::error("jinja: '{}' is undefined (attribute '{}')", obj.undefined_name(), name);
  if ((obj.is_list() || obj.is_dict()) && !obj.is_namespace() && detail::is_mutating_method(name))
    throw tf::error("jinja: access to attribute '{}' of '{}' object is unsafe", name,
                    obj.type_name());
  if (obj.is_dict()) {
    if (!obj.is_namespace()) {
      value m = detail::dict_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const value* v = obj.find(name)) return *v;
    return value::make_undefined(name);
  }
  if (obj.is_string()) return detail::string_method(obj.as_string(), name);
  return value::make_undefined(name);
}

}  // namespace tf::jinja
