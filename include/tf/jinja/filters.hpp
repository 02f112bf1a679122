#pragma once
/// tf::jinja built-in filters and tests (the subset Hugging Face chat templates use).
#include <tf/error.hpp>
#include <tf/jinja/methods.hpp>
#include <tf/jinja/value.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::jinja {

namespace detail {

/// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as Python writes it.
struct json_writer {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: single line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;

  void str(std::string& out, const std::string& s) const {
    charge(1 + s.size() / 16);
    check_bytes(out.size() + s.size());
    out += '"';
    for (size_t i = 0; i < s.size(); ++i) {
      auto c = static_cast<unsigned char>(s[i]);
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
          } else if (c >= 0x80 && ensure_ascii) {
            std::uint32_t cp = 0;
            size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
            cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
            for (size_t k = 1; k < n && i + k < s.size(); ++k)
              cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            i += n - 1;
            char b[16];
            if (cp >= 0x10000) {
              cp -= 0x10000;
              std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10),
                            0xDC00 + (cp & 0x3FF));
            } else {
              std::snprintf(b, sizeof b, "\\u%04x", cp);
            }
            out += b;
          } else {
            out += static_cast<char>(c);
          }
      }
    }
    out += '"';
  }

  void newline(std::string& out, int level) const {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  }

  void write(std::string& out, const value& v, int level) const {
    switch (v.type()) {
      case value::kind::none:
        out += "null";
        return;
      case value::kind::boolean:
        out += v.as_bool() ? "true" : "false";
        return;
      case value::kind::integer:
        out += std::to_string(v.as_int());
        return;
      case value::kind::floating: {
        double d = v.as_float();
        if (std::isnan(d))
          out += "NaN";
        else if (std::isinf(d))
          out += d < 0 ? "-Infinity" : "Infinity";
        else
          out += float_repr(d);
        return;
      }
      case value::kind::string:
        str(out, v.as_string());
        return;
      case value::kind::list: {
        const auto& l = v.as_list();
        if (l.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < l.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(out, level + 1);
          write(out, l[i], level + 1);
          charge(1 + (item_sep.size() + static_cast<size_t>(std::max(indent, 0) * level)) / 64);
          check_bytes(out.size());
        }
        if (indent >= 0) newline(out, level);
        out += ']';
        return;
      }
      case value::kind::dict: {
        if (v.is_namespace()) break;
        std::vector<const std::pair<std::string, value>*> items;
        for (const auto& kv : v.as_dict()) items.push_back(&kv);
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (sort_keys)
          std::stable_sort(items.begin(), items.end(),
                           [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(out, level + 1);
          str(out, items[i]->first);
          out += key_sep;
          write(out, items[i]->second, level + 1);
          charge(1 + (item_sep.size() + key_sep.size() +
                      static_cast<size_t>(std::max(indent, 0) * level)) /
                         64);
          check_bytes(out.size());
        }
        if (indent >= 0) newline(out, level);
        out += '}';
        return;
      }
      default:
        break;
    }
    throw tf::error("jinja: tojson: object of type {} is not JSON serializable", v.type_name());
  }
};

inline std::string tojson(const value& v, call_args& a) {
  json_writer w;
  w.ensure_ascii = arg(a, 0, "ensure_ascii", value(false)).truthy();
  const value& ind = arg(a, 1, "indent", value(none_t{}));
  if (ind.is_int())
    w.indent = static_cast<int>(std::clamp<std::int64_t>(ind.as_int(), 0, 64));
  else if (!ind.is_none())
    throw tf::error("jinja: tojson: indent must be an integer");
  if (w.indent >= 0) w.item_sep = ",";
  const value& sep = arg(a, 2, "separators", value(none_t{}));
  if (sep.is_list() && sep.as_list().size() == 2) {
    w.item_sep = need_string(sep.as_list()[0], "tojson separators");
    w.key_sep = need_string(sep.as_list()[1], "tojson separators");
  }
  w.sort_keys = arg(a, 3, "sort_keys", value(false)).truthy();
  std::string out;
  w.write(out, v, 0);
  return out;
}

inline list_t to_list(const value& v) {
  if (v.is_list()) {
    charge(1 + v.as_list().size() / 4);
    return v.as_list();
  }
  if (v.is_undefined() || v.is_none()) {
    if (v.is_none()) throw tf::error("jinja: 'NoneType' object is not iterable");
    return {};
  }
  if (v.is_string()) {
    list_t out;
    for (auto& c : code_points(v.as_string())) out.emplace_back(std::move(c));
    return out;
  }
  if (v.is_dict()) {
    list_t out;
    for (const auto& kv : v.as_dict()) out.emplace_back(kv.first);
    return out;
  }
  throw tf::error("jinja: '{}' object is not iterable", v.type_name());
}

// Sort key: strings lower-cased unless case_sensitive.
inline value sort_key(const value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return value(lower(v.as_string()));
  return v;
}

// Follows a dotted attribute path ("a.b" or "0").
inline value attr_path(const value& v, const std::string& path) {
  value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_undefined()) return cur;
    bool digits = !part.empty() && part.size() <= 18 &&
                  std::all_of(part.begin(), part.end(),
                              [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (digits)
      cur = get_item(cur, value(static_cast<std::int64_t>(std::stoll(part))));
    else
      cur = cur.is_dict() ? (cur.find(part) ? *cur.find(part) : value::make_undefined(part))
                          : get_attr(cur, part);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

inline value round_value(const value& v, call_args& a) {
  const value& p = arg(a, 0, "precision", value(std::int64_t{0}));
  std::string method = to_string(arg(a, 1, "method", value("common")));
  double x = v.as_number();
  double f = std::pow(10.0, static_cast<double>(p.is_int() ? p.as_int() : 0));
  double r;
  if (method == "common") {
    r = std::nearbyint(x * f) / f;  // Python's round(): half to even
  } else if (method == "ceil") {
    r = std::ceil(x * f) / f;
  } else if (method == "floor") {
    r = std::floor(x * f) / f;
  } else {
    throw tf::error("jinja: round: method must be 'common', 'ceil' or 'floor', got '{}'", method);
  }
  return value(r);
}

}  // namespace detail

/// Applies test `name` (`x is name(args)`).
inline bool apply_test(const std::string& name, const value& v, call_args& a) {
  using K = value::kind;
  auto num_arg = [&](size_t i) {
    const value& x = detail::arg(a, i, "num", value());
    if (!x.is_number()) throw tf::error("jinja: test '{}' needs a number argument", name);
    return x;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "iterable") return v.is_list() || v.is_string() || (v.is_dict() && !v.is_namespace());
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && detail::lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && detail::upper(v.as_string()) == v.as_string();
  if (name == "even" || name == "odd") {
    if (!v.is_int())
      throw tf::error("jinja: test '{}' needs an integer, got {}", name, v.type_name());
    std::int64_t r = v.as_int() % 2;
    return name == "even" ? r == 0 : r != 0;
  }
  if (name == "divisibleby") {
    value d = num_arg(0);
    if (v.is_int() && d.is_int()) {
      if (d.as_int() == 0) throw tf::error("jinja: divisibleby 0");
      return v.as_int() % d.as_int() == 0;
    }
    return std::fmod(v.as_number(), d.as_number()) == 0.0;
  }
  const value& other = detail::arg(a, 0, "other", value());
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return equals(v, other);
  if (name == "ne" || name == "!=") return !equals(v, other);
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other) < 0;
  if (name == "le" || name == "<=") return compare(v, other) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other) > 0;
  if (name == "ge" || name == ">=") return compare(v, other) >= 0;
  if (name == "in") {
    if (other.is_list()) {
      for (const auto& e : other.as_list())
        if (equals(e, v)) return true;
      return false;
    }
    if (other.is_string() && v.is_string()) {
      detail::charge_search(other.as_string().size(), v.as_string().size());
      return other.as_string().find(v.as_string()) != std::string::npos;
    }
    if (other.is_dict() && v.is_string()) return other.find(v.as_string()) != nullptr;
    return false;
  }
  (void)K::none;
  throw tf::error("jinja: no test named '{}'", name);
}

/// Applies filter `name` to `v` (`v | name(args)`).
inline value apply_filter(const std::string& name, const value& v, call_args& a) {
  using detail::arg;
  const value none{none_t{}};
  auto str_of = [](const value& x) { return to_string(x); };
  if (name == "length" || name == "count") {
    if (v.is_string()) return value(detail::utf8_length(v.as_string()));
    if (v.is_list()) return value(static_cast<std::int64_t>(v.as_list().size()));
    if (v.is_dict()) return value(static_cast<std::int64_t>(v.as_dict().size()));
    if (v.is_undefined()) return value(std::int64_t{0});
    throw tf::error("jinja: object of type '{}' has no len()", v.type_name());
  }
  if (v.is_string()) detail::charge(1 + v.as_string().size() / 64);
  if (name == "upper") return value(detail::upper(str_of(v)));
  if (name == "lower") return value(detail::lower(str_of(v)));
  if (name == "capitalize") return value(detail::capitalize(str_of(v)));
  if (name == "title") {
    // Jinja splits words at runs of whitespace, '-', '(', '{', '[', '<'
    std::string s = str_of(v), out;
    bool start = true;
    for (char ch : s) {
      auto c = static_cast<unsigned char>(ch);
      bool sep =
          detail::is_py_space(ch) || ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<';
      if (sep) {
        out += ch;
        start = true;
      } else {
        out += static_cast<char>(start ? std::toupper(c) : std::tolower(c));
        start = false;
      }
    }
    return value(out);
  }
  if (name == "trim") return value(detail::strip(str_of(v), arg(a, 0, "chars", none), true, true));
  if (name == "replace") {
    const value& c = arg(a, 2, "count", none);
    return value(detail::replace_all(str_of(v), str_of(arg(a, 0, "old", value(""))),
                                     str_of(arg(a, 1, "new", value(""))),
                                     c.is_int() ? c.as_int() : -1));
  }
  if (name == "string") return value(str_of(v));
  if (name == "safe" || name == "e" || name == "escape" || name == "forceescape") {
    if (name == "safe") return v;
    std::string out;
    for (char c : str_of(v)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return value(out);
  }
  if (name == "join") {
    std::string sep = str_of(arg(a, 0, "d", value("")));
    const value& attr = arg(a, 1, "attribute", none);
    std::string out;
    bool first = true;
    for (const auto& e : detail::to_list(v)) {
      if (!first) out += sep;
      first = false;
      out += str_of(attr.is_none() ? e : detail::attr_path(e, str_of(attr)));
      detail::charge(1 + sep.size() / 64);
      detail::check_bytes(out.size());
    }
    return value(out);
  }
  if (name == "first" || name == "last") {
    list_t l = detail::to_list(v);
    if (l.empty()) return value::make_undefined(name);
    return name == "first" ? l.front() : l.back();
  }
  if (name == "list") return value(detail::to_list(v));
  if (name == "int") {
    const value& def = arg(a, 0, "default", value(std::int64_t{0}));
    const value& base = arg(a, 1, "base", value(std::int64_t{10}));
    if (v.is_int()) return v;
    if (v.is_bool()) return value(std::int64_t{v.as_bool()});
    if (v.is_float()) {
      double d = v.as_float();
      if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return def;
      return value(static_cast<std::int64_t>(d));
    }
    if (v.is_string()) {
      std::string s = detail::strip(v.as_string(), none, true, true);
      int b = static_cast<int>(base.is_int() ? base.as_int() : 10);
      try {
        size_t used = 0;
        std::string digits = s;
        if (b == 16 && digits.size() > 2 && digits[0] == '0' &&
            (digits[1] == 'x' || digits[1] == 'X'))
          digits = digits.substr(2);
        if (b < 2 || b > 36) b = 10;
        long long x = std::stoll(digits, &used, b);
        if (used == digits.size()) return value(static_cast<std::int64_t>(x));
      } catch (const std::exception&) {
      }
      try {
        size_t used = 0;
        double d = std::stod(s, &used);
        if (used == s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18)
          return value(static_cast<std::int64_t>(d));
      } catch (const std::exception&) {
      }
    }
    return def;
  }
  if (name == "float") {
    const value& def = arg(a, 0, "default", value(0.0));
    if (v.is_number() || v.is_bool()) return value(v.as_number());
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string s = detail::strip(v.as_string(), none, true, true);
        double d = std::stod(s, &used);
        if (used == s.size()) return value(d);
      } catch (const std::exception&) {
      }
    }
    return def;
  }
  if (name == "default" || name == "d") {
    const value& def = arg(a, 0, "default_value", value(""));
    bool boolean = arg(a, 1, "boolean", value(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return def;
    return v;
  }
  if (name == "tojson") return value(detail::tojson(v, a));
  if (name == "items") {
    if (v.is_undefined()) return value(list_t{});
    if (!v.is_dict()) throw tf::error("jinja: items filter needs a mapping, got {}", v.type_name());
    call_args none_args;
    return detail::dict_method(v, "items").as_callable()(none_args);
  }
  if (name == "dictsort") {
    if (!v.is_dict()) throw tf::error("jinja: dictsort needs a mapping, got {}", v.type_name());
    bool cs = arg(a, 0, "case_sensitive", value(false)).truthy();
    std::string by = str_of(arg(a, 1, "by", value("key")));
    bool rev = arg(a, 2, "reverse", value(false)).truthy();
    if (by != "key" && by != "value")
      throw tf::error("jinja: dictsort by must be 'key' or 'value'");
    std::vector<std::pair<value, value>> items;
    for (const auto& [k, x] : v.as_dict()) items.emplace_back(value(k), x);
    detail::charge(1 + items.size() * 20);
    std::stable_sort(items.begin(), items.end(), [&](const auto& p, const auto& q) {
      const value& x = by == "key" ? p.first : p.second;
      const value& y = by == "key" ? q.first : q.second;
      int c = compare(detail::sort_key(x, cs), detail::sort_key(y, cs));
      return rev ? c > 0 : c < 0;
    });
    list_t out;
    for (auto& [k, x] : items) out.emplace_back(list_t{k, x}, true);
    return value(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    bool attr_mode = name == "selectattr" || name == "rejectattr";
    bool keep = name == "selectattr" || name == "select";
    size_t first_test_arg = attr_mode ? 1 : 0;
    std::string attr = attr_mode ? str_of(arg(a, 0, "attr", value(""))) : "";
    bool has_test = a.pos.size() > first_test_arg;
    std::string test = has_test ? str_of(a.pos[first_test_arg]) : "";
    call_args targs;
    for (size_t i = first_test_arg + 1; i < a.pos.size(); ++i) targs.pos.push_back(a.pos[i]);
    list_t out;
    for (const auto& e : detail::to_list(v)) {
      detail::charge();
      value x = attr_mode ? detail::attr_path(e, attr) : e;
      bool ok = has_test ? apply_test(test, x, targs) : x.truthy();
      if (ok == keep) out.push_back(e);
    }
    return value(std::move(out));
  }
  if (name == "map") {
    list_t out;
    const value& attr = arg(a, 99, "attribute", none);
    if (!attr.is_none()) {
      const value& def = arg(a, 99, "default", value());
      for (const auto& e : detail::to_list(v)) {
        detail::charge();
        value x = detail::attr_path(e, str_of(attr));
        out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
      }
      return value(std::move(out));
    }
    if (a.pos.empty()) throw tf::error("jinja: map needs a filter name or attribute=");
    std::string f = str_of(a.pos[0]);
    call_args fargs;
    for (size_t i = 1; i < a.pos.size(); ++i) fargs.pos.push_back(a.pos[i]);
    fargs.kw = a.kw;
    for (const auto& e : detail::to_list(v)) {
      detail::charge();
      out.push_back(apply_filter(f, e, fargs));
    }
    return value(std::move(out));
  }
  if (name == "unique") {
    bool cs = arg(a, 0, "case_sensitive", value(false)).truthy();
    const value& attr = arg(a, 1, "attribute", none);
    list_t out, keys;
    for (const auto& e : detail::to_list(v)) {
      value k = detail::sort_key(attr.is_none() ? e : detail::attr_path(e, str_of(attr)), cs);
      detail::charge(1 + keys.size());
      bool seen = false;
      for (const auto& s : keys)
        if (equals(s, k)) seen = true;
      if (!seen) {
        keys.push_back(k);
        out.push_back(e);
      }
    }
    return value(std::move(out));
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = detail::code_points(v.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return value(out);
    }
    list_t l = detail::to_list(v);
    std::reverse(l.begin(), l.end());
    return value(std::move(l));
  }
  if (name == "sort") {
    bool rev = arg(a, 0, "reverse", value(false)).truthy();
    bool cs = arg(a, 1, "case_sensitive", value(false)).truthy();
    const value& attr = arg(a, 2, "attribute", none);
    list_t l = detail::to_list(v);
    auto key = [&](const value& e) {
      return detail::sort_key(attr.is_none() ? e : detail::attr_path(e, str_of(attr)), cs);
    };
    detail::charge(1 + l.size() * 20);
    std::stable_sort(l.begin(), l.end(), [&](const value& x, const value& y) {
      int c = compare(key(x), key(y));
      return rev ? c > 0 : c < 0;
    });
    return value(std::move(l));
  }
  if (name == "min" || name == "max") {
    bool cs = arg(a, 0, "case_sensitive", value(false)).truthy();
    const value& attr = arg(a, 1, "attribute", none);
    list_t l = detail::to_list(v);
    if (l.empty()) return value::make_undefined(name);
    auto key = [&](const value& e) {
      return detail::sort_key(attr.is_none() ? e : detail::attr_path(e, str_of(attr)), cs);
    };
    size_t best = 0;
    detail::charge(1 + l.size());
    for (size_t i = 1; i < l.size(); ++i) {
      int c = compare(key(l[i]), key(l[best]));
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return l[best];
  }
  if (name == "sum") {
    const value& attr = arg(a, 0, "attribute", none);
    value acc = arg(a, 1, "start", value(std::int64_t{0}));
    for (const auto& e : detail::to_list(v)) {
      detail::charge();
      value x = attr.is_none() ? e : detail::attr_path(e, str_of(attr));
      if (!(x.is_number() || x.is_bool()) || !(acc.is_number() || acc.is_bool()))
        throw tf::error("jinja: sum: unsupported operand types {} and {}", acc.type_name(),
                        x.type_name());
      if ((acc.is_int() || acc.is_bool()) && (x.is_int() || x.is_bool())) {
        std::int64_t r = 0;
        if (__builtin_add_overflow(static_cast<std::int64_t>(acc.as_number()),
                                   static_cast<std::int64_t>(x.as_number()), &r))
          throw tf::error("jinja: sum overflows int64");
        acc = value(r);
      } else {
        acc = value(acc.as_number() + x.as_number());
      }
    }
    return acc;
  }
  if (name == "abs") {
    if (v.is_int()) {
      if (v.as_int() == INT64_MIN) throw tf::error("jinja: abs overflows int64");
      return value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (v.is_float()) return value(std::fabs(v.as_float()));
    if (v.is_bool()) return value(std::int64_t{v.as_bool()});
    throw tf::error("jinja: bad operand type for abs(): {}", v.type_name());
  }
  if (name == "round") {
    if (!(v.is_number() || v.is_bool())) throw tf::error("jinja: round needs a number");
    return detail::round_value(v, a);
  }
  if (name == "wordcount") {
    std::int64_t n = 0;
    bool in_word = false;
    for (char c : str_of(v)) {
      bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
               static_cast<unsigned char>(c) >= 0x80;
      if (w && !in_word) ++n;
      in_word = w;
    }
    return value(n);
  }
  if (name == "indent") {
    const value& width = arg(a, 0, "width", value(std::int64_t{4}));
    bool first = arg(a, 1, "first", value(false)).truthy();
    bool blank = arg(a, 2, "blank", value(false)).truthy();
    std::string pad =
        width.is_string() ? width.as_string()
        : width.is_int()
            ? std::string(static_cast<size_t>(std::clamp<std::int64_t>(width.as_int(), 0, 1024)),
                          ' ')
            : throw tf::error("jinja: indent width must be int or str");
    std::string s = str_of(v);
    std::string out;
    size_t start = 0;
    bool first_line = true;
    while (true) {
      size_t nl = s.find('\n', start);
      std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      bool do_pad = first_line ? first : (blank || !detail::strip(line, none, true, true).empty());
      if (do_pad) out += pad;
      out += line;
      detail::charge(1 + pad.size() / 64);
      detail::check_bytes(out.size());
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return value(out);
  }
  if (name == "batch") {
    const value& n = arg(a, 0, "linecount", value(std::int64_t{1}));
    const value& fill = arg(a, 1, "fill_with", none);
    if (!n.is_int() || n.as_int() <= 0)
      throw tf::error("jinja: batch size must be a positive integer");
    detail::check_items(static_cast<std::size_t>(
        std::min<std::int64_t>(n.as_int(), std::numeric_limits<std::int64_t>::max() / 2)));
    list_t out, cur;
    for (const auto& e : detail::to_list(v)) {
      cur.push_back(e);
      if (static_cast<std::int64_t>(cur.size()) == n.as_int()) {
        out.emplace_back(std::move(cur));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (!fill.is_none())
        while (static_cast<std::int64_t>(cur.size()) < n.as_int()) cur.push_back(fill);
      out.emplace_back(std::move(cur));
    }
    return value(std::move(out));
  }
  throw tf::error("jinja: no filter named '{}'", name);
}

}  // namespace tf::jinja
