#pragma once
/// tf::jinja::template_t: a parsed Jinja template (the Hugging Face chat-template subset).
#include <tf/error.hpp>
#include <tf/jinja/ast.hpp>
#include <tf/jinja/evaluator.hpp>
#include <tf/jinja/parser.hpp>
#include <tf/jinja/value.hpp>

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace tf::jinja {

namespace detail {

inline value make_globals_value(std::string_view name, const render_options& opt) {
  if (name == "range") {
    std::size_t const max_items = opt.max_items;
    return value(function([max_items](call_args& a) {
      std::int64_t start = 0, stop = 0, step = 1;
      auto num = [](const value& v) {
        if (!v.is_int()) throw tf::error("jinja: range() needs integers, got {}", v.type_name());
        return v.as_int();
      };
      if (a.pos.size() == 1) {
        stop = num(a.pos[0]);
      } else if (a.pos.size() == 2 || a.pos.size() == 3) {
        start = num(a.pos[0]);
        stop = num(a.pos[1]);
        if (a.pos.size() == 3) step = num(a.pos[2]);
      } else {
        throw tf::error("jinja: range() takes 1 to 3 arguments, got {}", a.pos.size());
      }
      if (step == 0) throw tf::error("jinja: range() step must not be zero");
      list_t out;
      for (std::int64_t i = start; step > 0 ? i < stop : i > stop;) {
        if (out.size() >= max_items)
          throw tf::error("jinja: range() longer than {} items (render_options::max_items)",
                          max_items);
        out.emplace_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;
      }
      return value(std::move(out));
    }));
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return value(function([ns](call_args& a) {
      dict_t d;
      for (const auto& p : a.pos) {
        if (!p.is_dict())
          throw tf::error("jinja: namespace()/dict() positional argument must be a mapping");
        for (const auto& kv : p.as_dict()) d.push_back(kv);
      }
      for (auto& [k, v] : a.kw) {
        bool replaced = false;
        for (auto& [dk, dv] : d)
          if (dk == k) {
            dv = v;
            replaced = true;
          }
        if (!replaced) d.emplace_back(k, v);
      }
      return value(std::move(d), ns);
    }));
  }
  if (name == "raise_exception") {
    return value(function([](call_args& a) -> value {
      throw tf::error("jinja: raise_exception: {}", a.pos.empty() ? "" : to_string(a.pos[0]));
    }));
  }
  if (name == "strftime_now") {
    std::optional<std::time_t> now = opt.now;
    return value(function([now](call_args& a) {
      if (a.pos.empty() || !a.pos[0].is_string())
        throw tf::error("jinja: strftime_now(format) needs a string");
      std::time_t t = now ? *now : std::time(nullptr);
      std::tm tm{};
      if (now)
        gmtime_r(&t, &tm);
      else
        localtime_r(&t, &tm);
      char buf[512];
      size_t n = std::strftime(buf, sizeof buf, a.pos[0].as_string().c_str(), &tm);
      return value(std::string(buf, n));
    }));
  }
  return value();
}

}  // namespace detail

/// A compiled template; render it any number of times with different variables.
class template_t {
 public:
  /// Parses `src`; throws tf::error with line/column on a syntax error.
  explicit template_t(std::string_view src, lex_options opt = {})
      : body_(std::make_shared<body_t>(parse(src, opt))) {}

  /// Renders with `vars` (a dict) as the top-level variables.
  std::string render(const value& vars, render_options opt = {}) const {
    auto globals = std::make_shared<detail::frame>();
    for (auto n : {"range", "namespace", "dict", "raise_exception", "strftime_now"})
      globals->set(n, detail::make_globals_value(n, opt));
    auto root = std::make_shared<detail::frame>();
    root->parent = globals;
    if (vars.is_dict())
      for (const auto& [k, v] : vars.as_dict()) root->set(k, v);
    else if (!vars.is_undefined() && !vars.is_none())
      throw tf::error("jinja: template variables must be a mapping, got {}", vars.type_name());
    detail::evaluator ev(opt);
    return ev.run(*body_, root);
  }

  /// Renders with a JSON object as the variables (ordered_json keeps key order).
  template <class Json>
  std::string render_json(const Json& vars, render_options opt = {}) const {
    return render(value::from_json(vars), opt);
  }

 private:
  std::shared_ptr<body_t> body_;
};

/// Parses and renders in one call.
template <class Json = nlohmann::ordered_json>
inline std::string render(std::string_view src, const Json& vars, render_options opt = {}) {
  return template_t(src).render_json(vars, opt);
}

}  // namespace tf::jinja
