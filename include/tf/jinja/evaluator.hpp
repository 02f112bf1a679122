#pragma once
/// tf::jinja evaluator: walks the statement tree with Jinja scoping and writes the output.
#include <tf/error.hpp>
#include <tf/jinja/ast.hpp>
#include <tf/jinja/budget.hpp>
#include <tf/jinja/filters.hpp>
#include <tf/jinja/methods.hpp>
#include <tf/jinja/value.hpp>

#include <cmath>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tf::jinja {

namespace detail {

struct frame {
  std::vector<std::pair<std::string, value>> vars;
  std::shared_ptr<frame> parent;

  const value* lookup(const std::string& n) const {
    for (const frame* f = this; f; f = f->parent.get())
      for (const auto& [k, v] : f->vars)
        if (k == n) return &v;
    return nullptr;
  }
  void set(const std::string& n, value v) {
    for (auto& [k, x] : vars)
      if (k == n) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(n, std::move(v));
  }
};
using frame_ptr = std::shared_ptr<frame>;

class evaluator {
 public:
  enum class flow { normal, break_, continue_ };

  explicit evaluator(render_options opt) : opt_(opt), budget_(opt_) {}
  evaluator(const evaluator&) = delete;
  evaluator& operator=(const evaluator&) = delete;
  // Macros hold their defining frame and frames hold macros: break those cycles.
  ~evaluator() {
    for (auto& f : closure_frames_) f->vars.clear();
  }

  std::string run(const body_t& body, frame_ptr root) {
    std::string out;
    budget_scope scope(budget_);
    struct report_steps {
      const budget& b;
      std::uint64_t* to;
      ~report_steps() {
        if (to) *to = b.steps();
      }
    } report{budget_, opt_.steps_used};
    try {
      exec_body(body, root, out);
    } catch (const tf::error& e) {
      std::string what = e.what();
      if (what.find(" at line ") != std::string::npos) throw;
      throw tf::error("{} (at line {}, column {})", what, pos_.line, pos_.column);
    }
    return out;
  }

 private:
  struct depth_guard {
    evaluator& ev;
    explicit depth_guard(evaluator& e) : ev(e) {
      if (++ev.depth_ > ev.opt_.max_depth)
        throw tf::error("jinja: template nesting deeper than {} (runaway recursion?)",
                        ev.opt_.max_depth);
    }
    ~depth_guard() { --ev.depth_; }
  };

  flow exec_body(const body_t& body, const frame_ptr& f, std::string& out) {
    for (const auto& s : body) {
      flow r = exec(*s, f, out);
      if (r != flow::normal) return r;
    }
    return flow::normal;
  }

  static frame_ptr child(const frame_ptr& parent) {
    auto f = std::make_shared<frame>();
    f->parent = parent;
    return f;
  }

  void assign(const std::vector<std::string>& targets, const value& v, frame& f) {
    if (targets.size() == 1) {
      f.set(targets[0], v);
      return;
    }
    list_t items = to_list(v);
    if (items.size() != targets.size())
      throw tf::error("jinja: cannot unpack {} values into {} names", items.size(), targets.size());
    for (size_t i = 0; i < targets.size(); ++i) f.set(targets[i], items[i]);
  }

  // Appends to an output buffer (the render's, or a block's or macro's), within the size limit.
  static void emit(std::string& out, std::string_view text) {
    detail::charge(1 + text.size() / 64);
    detail::check_bytes(out.size() + text.size());
    out += text;
  }

  // Charges for a value an expression built and checks it against the limits; a list or mapping
  // also pays for the strings it copied in.
  void account(const value& v) {
    if (v.is_string()) {
      charge_bytes(v.as_string().size());
    } else if (v.is_list() || v.is_dict()) {
      budget_.check_depth(v.depth());
      std::size_t n = 0, bytes = 0;
      if (v.is_list()) {
        n = v.as_list().size();
        for (const auto& e : v.as_list())
          if (e.is_string()) bytes += e.as_string().size();
      } else {
        n = v.as_dict().size();
        for (const auto& [k, e] : v.as_dict())
          if (e.is_string()) bytes += e.as_string().size();
      }
      charge_items(n);
      detail::charge(bytes / 64);
    }
  }

  flow exec(const stmt& s, const frame_ptr& f, std::string& out) {
    depth_guard g(*this);
    detail::charge();
    pos_ = s.pos;
    switch (s.type) {
      case stmt::kind::text:
        emit(out, s.text);
        return flow::normal;
      case stmt::kind::output:
        emit(out, to_string(eval(*s.e, f)));
        return flow::normal;
      case stmt::kind::if_:
        for (const auto& [cond, body] : s.branches) {
          if (!cond || eval(*cond, f).truthy()) return exec_body(body, f, out);
        }
        return flow::normal;
      case stmt::kind::for_:
        return exec_for(s, f, out);
      case stmt::kind::set: {
        value v = eval(*s.e, f);
        if (!s.attr.empty()) {
          const value* ns = f->lookup(s.targets[0]);
          if (!ns || !ns->is_namespace())
            throw tf::error("jinja: cannot assign attribute '{}' on '{}': not a namespace", s.attr,
                            s.targets[0]);
          // No namespace inside a namespace: no cycles, and every value's nesting stays bounded.
          if (v.holds_namespace())
            throw tf::error("jinja: cannot store a namespace (or a value holding one) in '{}.{}'",
                            s.targets[0], s.attr);
          budget_.check_depth(v.depth() + 1);
          auto& d = ns->namespace_dict();
          for (auto& [k, x] : d)
            if (k == s.attr) {
              x = std::move(v);
              return flow::normal;
            }
          d.emplace_back(s.attr, std::move(v));
          return flow::normal;
        }
        assign(s.targets, v, *f);
        return flow::normal;
      }
      case stmt::kind::set_block: {
        std::string body;
        exec_body(s.body, f, body);
        value v(std::move(body));
        for (const auto& flt : s.filters) v = apply(*flt, v, f);
        f->set(s.targets[0], std::move(v));
        return flow::normal;
      }
      case stmt::kind::filter_block: {
        std::string body;
        exec_body(s.body, f, body);
        value v(std::move(body));
        for (const auto& flt : s.filters) v = apply(*flt, v, f);
        emit(out, to_string(v));
        return flow::normal;
      }
      case stmt::kind::macro:
        f->set(s.text, make_macro(s, f, s.body));
        return flow::normal;
      case stmt::kind::call_block: {
        value caller = make_macro(s, f, s.body);
        const expr& call = *s.e;
        value callee = eval(*call.args[0], f);
        call_args a = eval_args(call, f);
        a.kw.emplace_back("caller", caller);
        emit(out, to_string(invoke(callee, a, call)));
        return flow::normal;
      }
      case stmt::kind::break_:
        return flow::break_;
      case stmt::kind::continue_:
        return flow::continue_;
      case stmt::kind::scope: {
        auto inner = child(f);
        exec_body(s.body, inner, out);
        return flow::normal;
      }
    }
    return flow::normal;
  }

  flow exec_for(const stmt& s, const frame_ptr& f, std::string& out) {
    value seq = eval(*s.e, f);
    list_t items;
    if (seq.is_dict() && !seq.is_namespace()) {
      for (const auto& kv : seq.as_dict()) items.emplace_back(kv.first);
    } else {
      items = to_list(seq);
    }
    account(value(items));
    if (s.cond) {
      list_t kept;
      for (auto& it : items) {
        auto probe = child(f);
        assign(s.targets, it, *probe);
        if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(s.else_body, f, out);
      return flow::normal;
    }
    auto n = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < n; ++i) {
      detail::charge(4);  // the loop variable's frame and namespace
      auto inner = child(f);
      dict_t loop;
      loop.emplace_back("index", value(i + 1));
      loop.emplace_back("index0", value(i));
      loop.emplace_back("revindex", value(n - i));
      loop.emplace_back("revindex0", value(n - i - 1));
      loop.emplace_back("first", value(i == 0));
      loop.emplace_back("last", value(i == n - 1));
      loop.emplace_back("length", value(n));
      loop.emplace_back("depth", value(std::int64_t{1}));
      loop.emplace_back("depth0", value(std::int64_t{0}));
      if (i > 0) loop.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.emplace_back("cycle", value(function([i](call_args& a) {
                          if (a.pos.empty())
                            throw tf::error("jinja: loop.cycle() needs at least one value");
                          return a.pos[static_cast<size_t>(i) % a.pos.size()];
                        })));
      inner->set("loop", value(std::move(loop), /*ns=*/true));
      assign(s.targets, items[static_cast<size_t>(i)], *inner);
      flow r = exec_body(s.body, inner, out);
      if (r == flow::break_) break;
    }
    return flow::normal;
  }

  value make_macro(const stmt& s, const frame_ptr& defined_in, const body_t& body) {
    const stmt* sp = &s;
    const body_t* bp = &body;
    closure_frames_.push_back(defined_in);
    return value(function([this, sp, bp, defined_in](call_args& a) {
      auto f = child(defined_in);
      const auto& params = sp->params;
      if (a.pos.size() > params.size())
        throw tf::error("jinja: macro '{}' takes {} arguments, got {}", sp->text, params.size(),
                        a.pos.size());
      std::vector<bool> bound(params.size(), false);
      for (size_t i = 0; i < a.pos.size(); ++i) {
        f->set(params[i].first, a.pos[i]);
        bound[i] = true;
      }
      for (auto& [k, v] : a.kw) {
        if (k == "caller") {
          f->set("caller", v);
          continue;
        }
        bool found = false;
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].first == k) {
            f->set(k, v);
            bound[i] = found = true;
          }
        if (!found) throw tf::error("jinja: macro '{}' has no argument '{}'", sp->text, k);
      }
      for (size_t i = 0; i < params.size(); ++i) {
        if (bound[i]) continue;
        f->set(params[i].first, params[i].second ? eval(*params[i].second, f)
                                                 : value::make_undefined(params[i].first));
      }
      std::string out;
      source_pos saved = pos_;
      exec_body(*bp, f, out);
      pos_ = saved;
      return value(std::move(out));
    }));
  }

  call_args eval_args(const expr& e, const frame_ptr& f) {
    call_args a;
    for (size_t i = 1; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i], f));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, f));
    return a;
  }

  value invoke(const value& callee, call_args& a, const expr& at) {
    if (callee.is_callable()) {
      depth_guard g(*this);
      value r = callee.as_callable()(a);
      account(r);
      return r;
    }
    if (callee.is_undefined()) {
      pos_ = at.pos;
      throw tf::error("jinja: '{}' is undefined (called as a function)", callee.undefined_name());
    }
    throw tf::error("jinja: '{}' object is not callable", callee.type_name());
  }

  value apply(const expr& flt, const value& v, const frame_ptr& f) {
    call_args a = eval_args(flt, f);
    pos_ = flt.pos;
    value r = apply_filter(flt.name, v, a);
    account(r);
    return r;
  }

  static void need_defined(const value& v) {
    if (v.is_undefined()) throw tf::error("jinja: '{}' is undefined", v.undefined_name());
  }

  static std::int64_t as_i(const value& v) {
    return v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int();
  }

  value arith(const std::string& op, const value& l, const value& r) {
    need_defined(l);
    need_defined(r);
    bool ln = l.is_number() || l.is_bool(), rn = r.is_number() || r.is_bool();
    if (ln && rn) {
      bool ints = !l.is_float() && !r.is_float();
      if (ints) {
        std::int64_t x = as_i(l), y = as_i(r), z = 0;
        if (op == "+") {
          if (__builtin_add_overflow(x, y, &z)) throw tf::error("jinja: integer overflow in +");
          return value(z);
        }
        if (op == "-") {
          if (__builtin_sub_overflow(x, y, &z)) throw tf::error("jinja: integer overflow in -");
          return value(z);
        }
        if (op == "*") {
          if (__builtin_mul_overflow(x, y, &z)) throw tf::error("jinja: integer overflow in *");
          return value(z);
        }
        if (op == "//" || op == "%") {
          if (y == 0) throw tf::error("jinja: integer division or modulo by zero");
          if (x == INT64_MIN && y == -1) throw tf::error("jinja: integer overflow in {}", op);
          std::int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {
            --q;
            m += y;
          }
          return op == "//" ? value(q) : value(m);
        }
        if (op == "**" && y >= 0) {
          if (x == 0 || x == 1) return value(y == 0 ? std::int64_t{1} : x);
          if (x == -1) return value(y % 2 == 0 ? std::int64_t{1} : std::int64_t{-1});
          std::int64_t acc = 1;
          for (std::int64_t k = 0; k < y; ++k) {
            if (__builtin_mul_overflow(acc, x, &acc))
              throw tf::error("jinja: integer overflow in **");
            if (acc == 0 || acc == 1) break;
          }
          return value(acc);
        }
      }
      double x = l.as_number(), y = r.as_number();
      if (op == "+") return value(x + y);
      if (op == "-") return value(x - y);
      if (op == "*") return value(x * y);
      if (op == "/") {
        if (y == 0.0) throw tf::error("jinja: division by zero");
        return value(x / y);
      }
      if (op == "//") {
        if (y == 0.0) throw tf::error("jinja: float floor division by zero");
        return value(std::floor(x / y));
      }
      if (op == "%") {
        if (y == 0.0) throw tf::error("jinja: float modulo by zero");
        double m = std::fmod(x, y);
        if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
        return value(m);
      }
      if (op == "**") return value(std::pow(x, y));
    }
    if (op == "+" && l.is_string() && r.is_string()) {
      check_bytes(l.as_string().size() + r.as_string().size());
      return value(l.as_string() + r.as_string());
    }
    if (op == "+" && l.is_list() && r.is_list()) {
      check_items(l.as_list().size() + r.as_list().size());
      list_t out = l.as_list();
      out.insert(out.end(), r.as_list().begin(), r.as_list().end());
      return value(std::move(out));
    }
    if (op == "*" && (l.is_string() || l.is_list()) && (r.is_int() || r.is_bool())) {
      std::int64_t n = as_i(r);
      size_t unit = l.is_string() ? l.as_string().size() : l.as_list().size();
      std::uint64_t const limit = l.is_string() ? opt_.max_output_bytes : opt_.max_items;
      if (n > 0 && unit > 0 && static_cast<std::uint64_t>(n) > limit / unit)
        throw tf::error("jinja: repetition result too large (more than {} {})", limit,
                        l.is_string() ? "bytes" : "items");
      if (l.is_list() && n > 0) {
        std::size_t bytes = 0;
        for (const auto& e : l.as_list())
          if (e.is_string()) bytes += e.as_string().size();
        charge_bytes(static_cast<std::uint64_t>(n) * bytes > opt_.max_output_bytes
                         ? opt_.max_output_bytes + 1
                         : static_cast<std::size_t>(n) * bytes);
      }
      if (l.is_string()) {
        std::string out;
        for (std::int64_t k = 0; k < n; ++k) out += l.as_string();
        return value(out);
      }
      list_t out;
      for (std::int64_t k = 0; k < n; ++k)
        out.insert(out.end(), l.as_list().begin(), l.as_list().end());
      return value(std::move(out));
    }
    throw tf::error("jinja: unsupported operand types for {}: '{}' and '{}'", op, l.type_name(),
                    r.type_name());
  }

  static bool contains(const value& hay, const value& needle) {
    if (hay.is_string()) {
      if (!needle.is_string())
        throw tf::error("jinja: 'in <string>' requires a string, got {}", needle.type_name());
      detail::charge_search(hay.as_string().size(), needle.as_string().size());
      return hay.as_string().find(needle.as_string()) != std::string::npos;
    }
    if (hay.is_list()) {
      detail::charge(1 + hay.as_list().size());
      for (const auto& e : hay.as_list())
        if (equals(e, needle)) return true;
      return false;
    }
    if (hay.is_dict()) return needle.is_string() && hay.find(needle.as_string()) != nullptr;
    if (hay.is_undefined()) throw tf::error("jinja: '{}' is undefined", hay.undefined_name());
    throw tf::error("jinja: argument of type '{}' is not iterable", hay.type_name());
  }

  value slice(const value& obj, const value& a, const value& b, const value& c) {
    auto idx = [](const value& v, std::int64_t def) {
      if (v.is_none() || v.is_undefined()) return std::optional<std::int64_t>{};
      if (!v.is_int()) throw tf::error("jinja: slice indices must be integers");
      (void)def;
      return std::optional<std::int64_t>{v.as_int()};
    };
    std::int64_t step = 1;
    if (auto s = idx(c, 1)) step = *s;
    if (step == 0) throw tf::error("jinja: slice step cannot be zero");
    bool const is_str = obj.is_string();
    if (!is_str && !obj.is_list()) {
      need_defined(obj);
      throw tf::error("jinja: '{}' object cannot be sliced", obj.type_name());
    }
    std::vector<std::uint32_t> starts;  // strings: where each code point starts, then the end
    if (is_str) starts = cp_starts(obj.as_string());
    auto n = static_cast<std::int64_t>(is_str ? starts.size() - 1 : obj.as_list().size());
    auto clampi = [&](std::optional<std::int64_t> v, std::int64_t def_pos, std::int64_t def_neg) {
      if (!v) return step > 0 ? def_pos : def_neg;
      std::int64_t x = *v;
      if (x < 0) x += n;
      if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
      return std::clamp<std::int64_t>(x, -1, n - 1);
    };
    std::int64_t start = clampi(idx(a, 0), 0, n - 1);
    std::int64_t stop = clampi(idx(b, 0), n, -1);
    if (is_str) {
      const std::string& str = obj.as_string();
      std::string out;
      if (step == 1) {
        if (start < stop)
          out = str.substr(starts[static_cast<size_t>(start)],
                           starts[static_cast<size_t>(stop)] - starts[static_cast<size_t>(start)]);
      } else {
        for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          auto k = static_cast<size_t>(i);
          out.append(str, starts[k], starts[k + 1] - starts[k]);
        }
      }
      return value(std::move(out));
    }
    const list_t& items = obj.as_list();
    list_t out;
    for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      out.push_back(items[static_cast<size_t>(i)]);
    return value(std::move(out), obj.is_tuple());
  }

  value eval(const expr& e, const frame_ptr& f) {
    depth_guard g(*this);
    detail::charge();
    switch (e.type) {
      case expr::kind::literal:
        return e.lit;
      case expr::kind::name: {
        if (const value* v = f->lookup(e.name)) return *v;
        return value::make_undefined(e.name);
      }
      case expr::kind::list:
      case expr::kind::tuple: {
        list_t l;
        for (const auto& x : e.args) l.push_back(eval(*x, f));
        value v(std::move(l), e.type == expr::kind::tuple);
        account(v);
        return v;
      }
      case expr::kind::dict: {
        dict_t d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          value k = eval(*e.args[i], f);
          if (!k.is_string())
            throw tf::error("jinja: dict keys must be strings, got {}", k.type_name());
          value v = eval(*e.args[i + 1], f);
          bool replaced = false;
          for (auto& [dk, dv] : d)
            if (dk == k.as_string()) {
              dv = v;
              replaced = true;
            }
          if (!replaced) d.emplace_back(k.as_string(), std::move(v));
        }
        value v(std::move(d));
        account(v);
        return v;
      }
      case expr::kind::getattr: {
        value obj = eval(*e.args[0], f);
        pos_ = e.pos;
        return get_attr(obj, e.name);
      }
      case expr::kind::getitem: {
        value obj = eval(*e.args[0], f);
        value key = eval(*e.args[1], f);
        pos_ = e.pos;
        return get_item(obj, key);
      }
      case expr::kind::slice: {
        value obj = eval(*e.args[0], f);
        value parts[3];
        for (int k = 0; k < 3; ++k)
          parts[k] = e.args[1 + static_cast<size_t>(k)]
                         ? eval(*e.args[1 + static_cast<size_t>(k)], f)
                         : value(none_t{});
        pos_ = e.pos;
        return slice(obj, parts[0], parts[1], parts[2]);
      }
      case expr::kind::call: {
        value callee = eval(*e.args[0], f);
        call_args a = eval_args(e, f);
        pos_ = e.pos;
        return invoke(callee, a, e);
      }
      case expr::kind::filter: {
        value v = e.args[0] ? eval(*e.args[0], f) : value();
        return apply(e, v, f);
      }
      case expr::kind::test: {
        value v = eval(*e.args[0], f);
        call_args a = eval_args(e, f);
        pos_ = e.pos;
        bool r = apply_test(e.name, v, a);
        return value(e.negated ? !r : r);
      }
      case expr::kind::neg:
      case expr::kind::pos: {
        value v = eval(*e.args[0], f);
        pos_ = e.pos;
        need_defined(v);
        if (e.type == expr::kind::pos && (v.is_number() || v.is_bool())) return v;
        if (v.is_int()) {
          if (v.as_int() == INT64_MIN) throw tf::error("jinja: integer overflow in unary -");
          return value(-v.as_int());
        }
        if (v.is_bool()) return value(-std::int64_t{v.as_bool()});
        if (v.is_float()) return value(-v.as_float());
        throw tf::error("jinja: bad operand type for unary -: '{}'", v.type_name());
      }
      case expr::kind::binary: {
        value l = eval(*e.args[0], f);
        value r = eval(*e.args[1], f);
        pos_ = e.pos;
        value out = arith(e.name, l, r);
        account(out);
        return out;
      }
      case expr::kind::concat: {
        std::string s;
        for (const auto& x : e.args) {
          s += to_string(eval(*x, f));
          charge_bytes(s.size());
        }
        return value(std::move(s));
      }
      case expr::kind::compare: {
        value l = eval(*e.args[0], f);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          value r = eval(*e.args[i + 1], f);
          pos_ = e.pos;
          const std::string& op = e.ops[i];
          bool ok;
          if (op == "==")
            ok = equals(l, r);
          else if (op == "!=")
            ok = !equals(l, r);
          else if (op == "in")
            ok = contains(r, l);
          else if (op == "not in")
            ok = !contains(r, l);
          else {
            need_defined(l);
            need_defined(r);
            int c = compare(l, r);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return value(false);
          l = std::move(r);
        }
        return value(true);
      }
      case expr::kind::and_: {
        value l = eval(*e.args[0], f);
        return l.truthy() ? eval(*e.args[1], f) : l;
      }
      case expr::kind::or_: {
        value l = eval(*e.args[0], f);
        return l.truthy() ? l : eval(*e.args[1], f);
      }
      case expr::kind::not_:
        return value(!eval(*e.args[0], f).truthy());
      case expr::kind::cond: {
        if (eval(*e.args[0], f).truthy()) return eval(*e.args[1], f);
        return e.args[2] ? eval(*e.args[2], f) : value::make_undefined("conditional");
      }
    }
    return value();
  }

  render_options opt_;
  budget budget_;
  std::vector<frame_ptr> closure_frames_;
  source_pos pos_;
  int depth_ = 0;
};

}  // namespace detail

}  // namespace tf::jinja
