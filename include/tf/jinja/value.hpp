#pragma once
/// tf::jinja::value: the dynamic value a template computes with (Python semantics, JSON in/out).
#include <tf/error.hpp>
#include <tf/jinja/budget.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tf::jinja {

class value;
/// Positional and keyword arguments of a call.
struct call_args {
  std::vector<value> pos;
  std::vector<std::pair<std::string, value>> kw;
};
/// A callable: macros, globals (range, namespace, ...) and bound methods.
using function = std::function<value(call_args&)>;

/// Marks a value that is not defined (Jinja's Undefined); keeps the name for error messages.
struct undefined_t {
  std::string name;
};
struct none_t {};
using list_t = std::vector<value>;
/// Insertion-ordered string-keyed map, like a Python dict built from JSON.
using dict_t = std::vector<std::pair<std::string, value>>;

/// A template value: undefined, none, bool, int, float, string, list/tuple, dict/namespace,
/// callable. Lists and dicts are shared (cheap copies); only namespaces are mutated.
class value {
 public:
  enum class kind { undefined, none, boolean, integer, floating, string, list, dict, callable };

  value() : v_(undefined_t{}) {}
  value(none_t) : v_(none_t{}) {}
  value(bool b) : v_(b) {}
  value(int i) : v_(std::int64_t{i}) {}
  value(std::int64_t i) : v_(i) {}
  value(double d) : v_(d) {}
  value(std::string s) : v_(std::move(s)) {}
  value(const char* s) : v_(std::string(s)) {}
  value(std::string_view s) : v_(std::string(s)) {}
  value(list_t l, bool tuple = false) : v_(std::make_shared<list_t>(std::move(l))), tuple_(tuple) {
    for (const auto& e : as_list()) absorb(e);
  }
  value(dict_t d, bool ns = false)
      : v_(std::make_shared<dict_t>(std::move(d))), ns_(ns), holds_ns_(ns) {
    for (const auto& kv : as_dict()) absorb(kv.second);
  }
  value(function f) : v_(std::make_shared<function>(std::move(f))) {}
  static value make_undefined(std::string name) { return value(undefined_t{std::move(name)}); }
  value(undefined_t u) : v_(std::move(u)) {}

  kind type() const { return static_cast<kind>(v_.index()); }
  bool is_undefined() const { return type() == kind::undefined; }
  bool is_none() const { return type() == kind::none; }
  bool is_bool() const { return type() == kind::boolean; }
  bool is_int() const { return type() == kind::integer; }
  bool is_float() const { return type() == kind::floating; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return type() == kind::string; }
  bool is_list() const { return type() == kind::list; }
  bool is_tuple() const { return is_list() && tuple_; }
  bool is_dict() const { return type() == kind::dict; }
  bool is_namespace() const { return is_dict() && ns_; }
  bool is_callable() const { return type() == kind::callable; }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  /// Numeric value as double (bools count as 0/1, like Python).
  double as_number() const {
    if (is_int()) return static_cast<double>(as_int());
    if (is_bool()) return as_bool() ? 1.0 : 0.0;
    return as_float();
  }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const list_t& as_list() const { return *std::get<std::shared_ptr<list_t>>(v_); }
  const dict_t& as_dict() const { return *std::get<std::shared_ptr<dict_t>>(v_); }
  /// Mutable access for namespace attribute assignment.
  dict_t& namespace_dict() const { return *std::get<std::shared_ptr<dict_t>>(v_); }
  const function& as_callable() const { return *std::get<std::shared_ptr<function>>(v_); }
  const std::string& undefined_name() const { return std::get<undefined_t>(v_).name; }

  /// Dict lookup by key; nullptr when absent or not a dict.
  const value* find(std::string_view key) const {
    if (!is_dict()) return nullptr;
    for (const auto& [k, v] : as_dict())
      if (k == key) return &v;
    return nullptr;
  }

  /// Python truthiness.
  bool truthy() const {
    switch (type()) {
      case kind::undefined:
      case kind::none:
        return false;
      case kind::boolean:
        return as_bool();
      case kind::integer:
        return as_int() != 0;
      case kind::floating:
        return as_float() != 0.0;
      case kind::string:
        return !as_string().empty();
      case kind::list:
        return !as_list().empty();
      case kind::dict:
        return is_namespace() || !as_dict().empty();
      case kind::callable:
        return true;
    }
    return false;
  }

  /// How deeply lists and mappings nest inside this value (0 for a scalar), as computed when each
  /// container was built; namespaces count as they were built (assignments into one are checked).
  std::uint32_t depth() const { return depth_; }
  /// Whether this value is, or holds, a namespace (the one mutable kind).
  bool holds_namespace() const { return holds_ns_; }

  /// Python-style name of the type, for error messages.
  std::string type_name() const {
    switch (type()) {
      case kind::undefined:
        return "undefined";
      case kind::none:
        return "NoneType";
      case kind::boolean:
        return "bool";
      case kind::integer:
        return "int";
      case kind::floating:
        return "float";
      case kind::string:
        return "str";
      case kind::list:
        return tuple_ ? "tuple" : "list";
      case kind::dict:
        return ns_ ? "Namespace" : "dict";
      case kind::callable:
        return "function";
    }
    return "?";
  }

  /// Converts JSON into a value; objects keep the order the JSON type iterates them in, so pass
  /// nlohmann::ordered_json to keep a document's own key order (as Python's json does). Throws
  /// tf::error for a document nested deeper than `max_depth`.
  template <class Json>
  static value from_json(const Json& j, int max_depth = 256) {
    if (max_depth < 0) throw tf::error("jinja: template variables are nested too deeply");
    switch (j.type()) {
      case Json::value_t::null:
        return value(none_t{});
      case Json::value_t::boolean:
        return value(j.template get<bool>());
      case Json::value_t::number_integer:
        return value(j.template get<std::int64_t>());
      case Json::value_t::number_unsigned: {
        auto u = j.template get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(INT64_MAX))
          throw tf::error("jinja: integer {} does not fit in int64", u);
        return value(static_cast<std::int64_t>(u));
      }
      case Json::value_t::number_float:
        return value(j.template get<double>());
      case Json::value_t::string:
        return value(j.template get<std::string>());
      case Json::value_t::array: {
        list_t l;
        l.reserve(j.size());
        for (const auto& e : j) l.push_back(from_json(e, max_depth - 1));
        return value(std::move(l));
      }
      case Json::value_t::object: {
        dict_t d;
        d.reserve(j.size());
        for (auto it = j.begin(); it != j.end(); ++it)
          d.emplace_back(it.key(), from_json(*it, max_depth - 1));
        return value(std::move(d));
      }
      default:
        return value(none_t{});
    }
  }

  /// Converts to JSON (key order kept); undefined and callables cannot be converted.
  nlohmann::ordered_json to_json() const {
    switch (type()) {
      case kind::none:
        return nullptr;
      case kind::boolean:
        return as_bool();
      case kind::integer:
        return as_int();
      case kind::floating:
        return as_float();
      case kind::string:
        return as_string();
      case kind::list: {
        auto a = nlohmann::ordered_json::array();
        detail::charge(1 + as_list().size());
        for (const auto& e : as_list()) a.push_back(e.to_json());
        return a;
      }
      case kind::dict: {
        auto r = nlohmann::ordered_json::object();
        detail::charge(1 + as_dict().size());
        for (const auto& [k, v] : as_dict()) r[k] = v.to_json();
        return r;
      }
      default:
        throw tf::error("jinja: a {} value cannot be converted to JSON", type_name());
    }
  }

 private:
  void absorb(const value& e) {
    depth_ = std::max(depth_, e.depth_ + 1);
    holds_ns_ = holds_ns_ || e.holds_ns_;
  }

  std::variant<undefined_t, none_t, bool, std::int64_t, double, std::string,
               std::shared_ptr<list_t>, std::shared_ptr<dict_t>, std::shared_ptr<function>>
      v_;
  bool tuple_ = false;
  bool ns_ = false;
  bool holds_ns_ = false;
  std::uint32_t depth_ = 0;
};

namespace detail {

/// Python's repr() of a float: shortest round-trip digits, exponent form outside [1e-4, 1e16).
inline std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  bool neg = s[0] == '-';
  if (neg) s.erase(0, 1);
  auto e = s.find('e');
  std::string mant = s.substr(0, e);
  int exp = std::stoi(s.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -5 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
            digits.substr(static_cast<size_t>(exp) + 1);
    }
    if (exp == -5) {
      // Python switches to exponent form below 1e-4
      out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + "e-05";
    }
  } else {
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    char eb[16];
    auto n = std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out.append(eb, static_cast<size_t>(n));
  }
  return neg ? "-" + out : out;
}

/// Python's repr() of a str.
inline std::string string_repr(const std::string& s) {
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    switch (c) {
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
      default:
        if (c == static_cast<unsigned char>(q)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\x%02x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += q;
  return out;
}

/// Splits UTF-8 text into code points (Python indexes strings by code point).
inline std::vector<std::string> code_points(std::string_view s) {
  check_items(s.size() / 4);
  charge(1 + s.size() / 4);
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = s.size() - i;
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

/// Byte offsets where each code point of UTF-8 text starts, then s.size() (the same boundaries
/// code_points uses, without a string per code point).
inline std::vector<std::uint32_t> cp_starts(std::string_view s) {
  if (s.size() >= UINT32_MAX) throw tf::error("jinja: a string of {} bytes is too long", s.size());
  charge(1 + s.size() / 64);
  std::vector<std::uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    out.push_back(static_cast<std::uint32_t>(i));
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = s.size() - i;
    i += n;
  }
  out.push_back(static_cast<std::uint32_t>(s.size()));
  return out;
}

/// Charges for searching `hay` for `needle` (std::string::find is quadratic at worst).
inline void charge_search(std::size_t hay, std::size_t needle) {
  charge(1 + hay / 64 + (hay / 64) * (needle / 64));
}

/// Number of code points in UTF-8 text.
inline std::int64_t utf8_length(std::string_view s) {
  std::int64_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++n;
  return n;
}

}  // namespace detail

/// repr() of a value, as Python prints containers' elements.
inline std::string repr(const value& v);

/// str() of a value: what {{ v }} prints.
inline std::string to_string(const value& v) {
  switch (v.type()) {
    case value::kind::undefined:
      return "";
    case value::kind::none:
      return "None";
    case value::kind::boolean:
      return v.as_bool() ? "True" : "False";
    case value::kind::integer:
      return std::to_string(v.as_int());
    case value::kind::floating:
      return detail::float_repr(v.as_float());
    case value::kind::string:
      return v.as_string();
    case value::kind::callable:
      return "<function>";
    default:
      return repr(v);
  }
}

inline std::string repr(const value& v) {
  switch (v.type()) {
    case value::kind::string:
      return detail::string_repr(v.as_string());
    case value::kind::list: {
      std::string out = v.is_tuple() ? "(" : "[";
      const auto& l = v.as_list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += ", ";
        auto const before = out.size();
        out += repr(l[i]);
        detail::charge(1 + (out.size() - before) / 64);
        detail::check_bytes(out.size());
      }
      if (v.is_tuple() && l.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case value::kind::dict: {
      std::string out = v.is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, e] : v.as_dict()) {
        if (!first) out += ", ";
        first = false;
        auto const before = out.size();
        out += detail::string_repr(k) + ": " + repr(e);
        detail::charge(1 + (out.size() - before) / 64);
        detail::check_bytes(out.size());
      }
      return out + (v.is_namespace() ? "}>" : "}");
    }
    default:
      return to_string(v);
  }
}

/// Python ==.
inline bool equals(const value& a, const value& b) {
  if (a.is_number() || a.is_bool()) {
    if (!(b.is_number() || b.is_bool())) return false;
    if (a.is_float() || b.is_float()) return a.as_number() == b.as_number();
    auto ai = a.is_bool() ? std::int64_t{a.as_bool()} : a.as_int();
    auto bi = b.is_bool() ? std::int64_t{b.as_bool()} : b.as_int();
    return ai == bi;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case value::kind::undefined:
    case value::kind::none:
      return true;
    case value::kind::string:
      return a.as_string() == b.as_string();
    case value::kind::list: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      detail::charge(1 + x.size());
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case value::kind::dict: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      detail::charge(1 + x.size() * x.size() / 16);
      for (const auto& [k, e] : x) {
        const value* o = b.find(k);
        if (!o || !equals(e, *o)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/// Python ordering (<0, 0, >0) for numbers, strings and lists; throws otherwise.
inline int compare(const value& a, const value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    detail::charge(1 + std::min(x.size(), y.size()));
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  throw tf::error("jinja: '<' not supported between {} and {}", a.type_name(), b.type_name());
}

}  // namespace tf::jinja
