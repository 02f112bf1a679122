#pragma once
/// tf::jinja parser: tokens -> statement tree; throws tf::error with line/column on bad syntax.
#include <tf/error.hpp>
#include <tf/jinja/ast.hpp>
#include <tf/jinja/lexer.hpp>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::jinja {

namespace detail {

class parser {
 public:
  /// Deepest nesting of blocks and of expression nodes a template may have: deeper input is
  /// refused at parse time, so neither the parser, the evaluator nor the tree's destructor can
  /// recurse without bound on a hostile template.
  static constexpr std::uint32_t max_nesting = 256;

  explicit parser(std::vector<token> toks) : t_(std::move(toks)) {}

  body_t parse_template() {
    body_t body = parse_body({});
    if (peek().type != token::kind::eof) fail(peek(), "unexpected tag");
    return body;
  }

 private:
  const token& peek(size_t k = 0) const {
    size_t i = i_ + k;
    return i < t_.size() ? t_[i] : t_.back();
  }
  const token& next() {
    const token& t = peek();
    if (i_ < t_.size() - 1) ++i_;
    return t;
  }
  // Counts the parser's own recursion (blocks, parentheses, unary operators).
  struct nest_guard {
    parser& p;
    explicit nest_guard(parser& pp) : p(pp) {
      if (++p.nest_ > max_nesting)
        p.fail(p.peek(), fmt::format("the template nests deeper than {} levels", max_nesting));
    }
    ~nest_guard() { --p.nest_; }
  };

  // Records a finished node's depth from its children's; refuses a tree deeper than the limit
  // (a chain like 1+1+1+... is built by a loop, not recursion, so depth is counted here).
  expr_ptr seal(expr_ptr e) {
    std::uint32_t d = 0;
    for (const auto& a : e->args)
      if (a) d = std::max(d, a->depth);
    for (const auto& [k, a] : e->kwargs)
      if (a) d = std::max(d, a->depth);
    e->depth = d + 1;
    if (e->depth > max_nesting)
      throw tf::error(
          "jinja: syntax error at line {}, column {}: an expression nests deeper than {} "
          "levels",
          e->pos.line, e->pos.column, max_nesting);
    return e;
  }

  [[noreturn]] void fail(const token& t, std::string_view what) const {
    std::string near = t.type == token::kind::eof ? "end of template" : "'" + t.text + "'";
    throw tf::error("jinja: syntax error at line {}, column {}: {} (near {})", t.pos.line,
                    t.pos.column, what, near);
  }
  bool is_op(std::string_view op, size_t k = 0) const {
    return peek(k).type == token::kind::op && peek(k).text == op;
  }
  bool is_name(std::string_view n, size_t k = 0) const {
    return peek(k).type == token::kind::name && peek(k).text == n;
  }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail(peek(), fmt::format("expected '{}'", op));
  }
  void expect_name(std::string_view n) {
    if (!accept_name(n)) fail(peek(), fmt::format("expected '{}'", n));
  }
  std::string expect_ident() {
    if (peek().type != token::kind::name) fail(peek(), "expected a name");
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != token::kind::block_end) fail(peek(), "expected end of statement '%}'");
    next();
  }

  static bool in(std::string_view s, std::initializer_list<std::string_view> set) {
    for (auto x : set)
      if (x == s) return true;
    return false;
  }

  // Parses statements until a block whose keyword is in `ends` (left unconsumed after '{%').
  body_t parse_body(std::initializer_list<std::string_view> ends) {
    nest_guard guard(*this);
    body_t body;
    while (true) {
      const token& t = peek();
      if (t.type == token::kind::eof) {
        if (ends.size() != 0)
          fail(t, fmt::format("unexpected end of template, expected '{}'", *ends.begin()));
        return body;
      }
      if (t.type == token::kind::text) {
        auto s = std::make_unique<stmt>();
        s->type = stmt::kind::text;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == token::kind::var_begin) {
        auto s = std::make_unique<stmt>();
        s->type = stmt::kind::output;
        s->pos = t.pos;
        next();
        s->e = parse_tuple_expr();
        if (peek().type != token::kind::var_end) fail(peek(), "expected '}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == token::kind::block_begin) {
        const token& kw = peek(1);
        if (kw.type != token::kind::name) fail(kw, "expected a statement name");
        if (in(kw.text, ends)) {
          next();  // '{%' ; the keyword is left for the caller
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail(t, "unexpected token");
      }
    }
  }

  stmt_ptr make_stmt(stmt::kind k, const token& at) {
    auto s = std::make_unique<stmt>();
    s->type = k;
    s->pos = at.pos;
    return s;
  }

  stmt_ptr parse_statement() {
    const token& kw = next();
    const std::string& k = kw.text;
    if (k == "if") return parse_if(kw);
    if (k == "for") return parse_for(kw);
    if (k == "set") return parse_set(kw);
    if (k == "macro") return parse_macro(kw);
    if (k == "call") return parse_call(kw);
    if (k == "filter") {
      auto s = make_stmt(stmt::kind::filter_block, kw);
      parse_filter_chain(s->filters);
      expect_block_end();
      s->body = parse_body({"endfilter"});
      next();
      expect_block_end();
      return s;
    }
    if (k == "generation") {
      auto s = make_stmt(stmt::kind::scope, kw);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail(kw, fmt::format("'{}' outside a loop", k));
      auto s = make_stmt(k == "break" ? stmt::kind::break_ : stmt::kind::continue_, kw);
      expect_block_end();
      return s;
    }
    fail(kw, fmt::format("unknown or unexpected statement '{}'", k));
  }

  stmt_ptr parse_if(const token& kw) {
    auto s = make_stmt(stmt::kind::if_, kw);
    expr_ptr cond = parse_expr();
    expect_block_end();
    while (true) {
      body_t body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      const token& end = next();
      if (end.text == "elif") {
        cond = parse_expr();
        expect_block_end();
      } else if (end.text == "else") {
        expect_block_end();
        body_t els = parse_body({"endif"});
        next();
        expect_block_end();
        s->branches.emplace_back(nullptr, std::move(els));
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  void parse_targets(std::vector<std::string>& out) {
    bool paren = accept_op("(");
    out.push_back(expect_ident());
    while (accept_op(",")) {
      if (peek().type != token::kind::name) break;
      out.push_back(expect_ident());
    }
    if (paren) expect_op(")");
  }

  stmt_ptr parse_for(const token& kw) {
    auto s = make_stmt(stmt::kind::for_, kw);
    parse_targets(s->targets);
    expect_name("in");
    s->e = parse_tuple_expr(/*no_cond=*/true);
    if (accept_name("if")) s->cond = parse_expr();
    if (accept_name("recursive")) fail(peek(), "recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (next().text == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
      next();
    }
    expect_block_end();
    return s;
  }

  stmt_ptr parse_set(const token& kw) {
    if (peek().type == token::kind::name && is_op(".", 1)) {
      auto s = make_stmt(stmt::kind::set, kw);
      s->targets.push_back(next().text);
      next();
      s->attr = expect_ident();
      expect_op("=");
      s->e = parse_tuple_expr();
      expect_block_end();
      return s;
    }
    std::vector<std::string> targets;
    parse_targets(targets);
    if (accept_op("=")) {
      auto s = make_stmt(stmt::kind::set, kw);
      s->targets = std::move(targets);
      s->e = parse_tuple_expr();
      expect_block_end();
      return s;
    }
    if (targets.size() != 1) fail(peek(), "expected '=' in set");
    auto s = make_stmt(stmt::kind::set_block, kw);
    s->targets = std::move(targets);
    if (accept_op("|")) parse_filter_chain(s->filters);
    expect_block_end();
    s->body = parse_body({"endset"});
    next();
    expect_block_end();
    return s;
  }

  void parse_params(std::vector<std::pair<std::string, expr_ptr>>& params) {
    expect_op("(");
    while (!is_op(")")) {
      std::string n = expect_ident();
      expr_ptr def;
      if (accept_op("=")) def = parse_expr();
      params.emplace_back(std::move(n), std::move(def));
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  stmt_ptr parse_macro(const token& kw) {
    auto s = make_stmt(stmt::kind::macro, kw);
    s->text = expect_ident();
    parse_params(s->params);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_call(const token& kw) {
    auto s = make_stmt(stmt::kind::call_block, kw);
    if (is_op("(")) parse_params(s->params);
    s->e = parse_expr();
    if (s->e->type != expr::kind::call) fail(kw, "expected a macro call after 'call'");
    expect_block_end();
    s->body = parse_body({"endcall"});
    next();
    expect_block_end();
    return s;
  }

  void parse_filter_chain(std::vector<expr_ptr>& out) {
    do {
      out.push_back(parse_filter(nullptr));
    } while (accept_op("|"));
  }

  expr_ptr make(expr::kind k, const token& at) {
    auto e = std::make_unique<expr>();
    e->type = k;
    e->pos = at.pos;
    return e;
  }

  // A top-level expression that may be an unparenthesised tuple: `a, b`.
  expr_ptr parse_tuple_expr(bool no_cond = false) {
    const token& start = peek();
    expr_ptr first = no_cond ? parse_or() : parse_expr();
    if (!is_op(",")) return first;
    auto t = make(expr::kind::tuple, start);
    t->args.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().type == token::kind::block_end || peek().type == token::kind::var_end) break;
      if (no_cond && is_name("if")) break;
      t->args.push_back(no_cond ? parse_or() : parse_expr());
    }
    return seal(std::move(t));
  }

  expr_ptr parse_expr() {
    nest_guard guard(*this);
    expr_ptr e = parse_or();
    while (is_name("if")) {
      const token& at = next();
      auto c = make(expr::kind::cond, at);
      c->args.push_back(parse_or());
      c->args.push_back(nullptr);
      c->args.push_back(nullptr);
      c->args[1] = std::move(e);
      if (accept_name("else")) c->args[2] = parse_expr();
      e = seal(std::move(c));
    }
    return e;
  }

  expr_ptr parse_or() {
    expr_ptr l = parse_and();
    while (is_name("or")) {
      auto n = make(expr::kind::or_, next());
      n->args.push_back(std::move(l));
      n->args.push_back(parse_and());
      l = seal(std::move(n));
    }
    return l;
  }

  expr_ptr parse_and() {
    expr_ptr l = parse_not();
    while (is_name("and")) {
      auto n = make(expr::kind::and_, next());
      n->args.push_back(std::move(l));
      n->args.push_back(parse_not());
      l = seal(std::move(n));
    }
    return l;
  }

  expr_ptr parse_not() {
    if (is_name("not")) {
      nest_guard guard(*this);
      auto n = make(expr::kind::not_, next());
      n->args.push_back(parse_not());
      return seal(std::move(n));
    }
    return parse_compare();
  }

  expr_ptr parse_compare() {
    const token& start = peek();
    expr_ptr l = parse_math1();
    expr_ptr cmp;
    while (true) {
      std::string op;
      if (peek().type == token::kind::op && in(peek().text, {"==", "!=", "<", ">", "<=", ">="})) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(expr::kind::compare, start);
        cmp->args.push_back(std::move(l));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(l);
  }

  expr_ptr binary(std::string op, expr_ptr l, expr_ptr r, const token& at) {
    auto n = make(expr::kind::binary, at);
    n->name = std::move(op);
    n->args.push_back(std::move(l));
    n->args.push_back(std::move(r));
    return seal(std::move(n));
  }

  expr_ptr parse_math1() {
    expr_ptr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const token& at = next();
      l = binary(at.text, std::move(l), parse_concat(), at);
    }
    return l;
  }

  expr_ptr parse_concat() {
    const token& start = peek();
    expr_ptr l = parse_math2();
    if (!is_op("~")) return l;
    auto n = make(expr::kind::concat, start);
    n->args.push_back(std::move(l));
    while (accept_op("~")) n->args.push_back(parse_math2());
    return seal(std::move(n));
  }

  expr_ptr parse_math2() {
    expr_ptr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const token& at = next();
      l = binary(at.text, std::move(l), parse_pow(), at);
    }
    return l;
  }

  expr_ptr parse_pow() {
    expr_ptr l = parse_unary(true);
    while (is_op("**")) {
      const token& at = next();
      l = binary("**", std::move(l), parse_unary(true), at);
    }
    return l;
  }

  expr_ptr parse_unary(bool with_filter) {
    expr_ptr e;
    if (is_op("-") || is_op("+")) {
      nest_guard guard(*this);
      const token& at = next();
      e = make(at.text == "-" ? expr::kind::neg : expr::kind::pos, at);
      e->args.push_back(parse_unary(false));
      e = seal(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  expr_ptr parse_primary() {
    const token& t = peek();
    switch (t.type) {
      case token::kind::name: {
        next();
        if (t.text == "true" || t.text == "True") return literal(value(true), t);
        if (t.text == "false" || t.text == "False") return literal(value(false), t);
        if (t.text == "none" || t.text == "None") return literal(value(none_t{}), t);
        auto n = make(expr::kind::name, t);
        n->name = t.text;
        return n;
      }
      case token::kind::string: {
        std::string s = next().text;
        while (peek().type == token::kind::string) s += next().text;
        return literal(value(std::move(s)), t);
      }
      case token::kind::integer:
        next();
        return literal(value(t.int_value), t);
      case token::kind::floating:
        next();
        return literal(value(t.float_value), t);
      case token::kind::op:
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make(expr::kind::tuple, t);
          expr_ptr first = parse_expr();
          if (accept_op(")")) return first;
          auto tup = make(expr::kind::tuple, t);
          tup->args.push_back(std::move(first));
          while (accept_op(",")) {
            if (is_op(")")) break;
            tup->args.push_back(parse_expr());
          }
          expect_op(")");
          return seal(std::move(tup));
        }
        if (t.text == "[") {
          next();
          auto l = make(expr::kind::list, t);
          while (!is_op("]")) {
            l->args.push_back(parse_expr());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return seal(std::move(l));
        }
        if (t.text == "{") {
          next();
          auto d = make(expr::kind::dict, t);
          while (!is_op("}")) {
            d->args.push_back(parse_expr());
            expect_op(":");
            d->args.push_back(parse_expr());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return seal(std::move(d));
        }
        break;
      default:
        break;
    }
    fail(t, "expected an expression");
  }

  expr_ptr literal(value v, const token& at) {
    auto n = make(expr::kind::literal, at);
    n->lit = std::move(v);
    return n;
  }

  void parse_call_args(expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == token::kind::name && is_op("=", 1)) {
        std::string k = next().text;
        next();
        call.kwargs.emplace_back(std::move(k), parse_expr());
      } else {
        if (!call.kwargs.empty()) fail(peek(), "positional argument after keyword argument");
        call.args.push_back(parse_expr());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  expr_ptr parse_postfix(expr_ptr e) {
    while (true) {
      if (is_op(".")) {
        const token& at = next();
        auto g = make(expr::kind::getattr, at);
        if (peek().type == token::kind::name) {
          g->name = next().text;
        } else if (peek().type == token::kind::integer) {
          g->type = expr::kind::getitem;
          g->args.push_back(std::move(e));
          g->args.push_back(literal(value(next().int_value), at));
          e = seal(std::move(g));
          continue;
        } else {
          fail(peek(), "expected an attribute name after '.'");
        }
        g->args.push_back(std::move(e));
        e = seal(std::move(g));
      } else if (is_op("[")) {
        const token& at = next();
        expr_ptr parts[3];
        bool is_slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expr();
          if (k < 2 && accept_op(":")) {
            is_slice = true;
            continue;
          }
          break;
        }
        expect_op("]");
        if (!is_slice && !parts[0]) fail(at, "empty subscript");
        auto g = make(is_slice ? expr::kind::slice : expr::kind::getitem, at);
        g->args.push_back(std::move(e));
        if (is_slice) {
          for (auto& p : parts) g->args.push_back(std::move(p));
        } else {
          g->args.push_back(std::move(parts[0]));
        }
        e = seal(std::move(g));
      } else if (is_op("(")) {
        auto c = make(expr::kind::call, peek());
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = seal(std::move(c));
      } else {
        return e;
      }
    }
  }

  expr_ptr parse_filter(expr_ptr subject) {
    const token& at = peek();
    auto f = make(expr::kind::filter, at);
    f->name = expect_ident();
    while (accept_op(".")) f->name += "." + expect_ident();
    f->args.push_back(std::move(subject));
    if (is_op("(")) parse_call_args(*f);
    return seal(std::move(f));
  }

  expr_ptr parse_filter_expr(expr_ptr e) {
    while (true) {
      if (accept_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        const token& at = next();
        auto t = make(expr::kind::test, at);
        t->negated = accept_name("not");
        t->name = expect_ident();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else {
          const token& n = peek();
          bool arg_follows = n.type == token::kind::string || n.type == token::kind::integer ||
                             n.type == token::kind::floating ||
                             (n.type == token::kind::name &&
                              !in(n.text, {"else", "or", "and", "if", "in", "not", "is"})) ||
                             (n.type == token::kind::op && (n.text == "[" || n.text == "{"));
          if (arg_follows) t->args.push_back(parse_postfix(parse_primary()));
        }
        e = seal(std::move(t));
      } else if (is_op("(")) {
        e = parse_postfix(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  std::uint32_t nest_ = 0;
};

}  // namespace detail

/// Parses a template into its statement tree.
inline body_t parse(std::string_view src, lex_options opt = {}) {
  return detail::parser(tokenize(src, opt)).parse_template();
}

}  // namespace tf::jinja
