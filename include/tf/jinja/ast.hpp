#pragma once
/// tf::jinja syntax tree: expressions and statements the parser builds and the evaluator walks.
#include <tf/jinja/lexer.hpp>
#include <tf/jinja/value.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tf::jinja {

struct expr;
using expr_ptr = std::unique_ptr<expr>;

/// An expression node; `args` holds operands in the order each kind documents.
struct expr {
  enum class kind {
    literal,  // lit
    name,     // name
    list,     // args: elements
    tuple,    // args: elements
    dict,     // args: key0, value0, key1, value1, ...
    getattr,  // args[0].name
    getitem,  // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]] (null parts absent)
    call,     // args[0](args[1..], kwargs)
    filter,   // args[0] | name(args[1..], kwargs); args[0] null inside a filter block
    test,     // args[0] is [not] name(args[1..], kwargs)
    neg,      // -args[0]
    pos,      // +args[0]
    binary,   // args[0] name args[1]: + - * / // % **
    concat,   // args joined with ~
    compare,  // args[0] ops[0] args[1] ops[1] args[2] ...
    and_,
    or_,
    not_,
    cond,  // args[1] if args[0] else args[2] (args[2] may be null)
  };
  kind type;
  source_pos pos;
  value lit;
  std::string name;
  std::vector<expr_ptr> args;
  std::vector<std::pair<std::string, expr_ptr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  std::uint32_t depth = 1;  // nodes on the longest path down from here (the parser bounds it)
};

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using body_t = std::vector<stmt_ptr>;

/// A statement node.
struct stmt {
  enum class kind {
    text,          // text
    output,        // {{ e }}
    if_,           // branches (cond null for else)
    for_,          // for targets in e [if cond] body [else else_body]
    set,           // targets (or ns.attr via attr) = e
    set_block,     // targets[0] = rendered body, piped through filters
    macro,         // name(params) body
    call_block,    // {% call(params) e %} body
    filter_block,  // body piped through filters
    break_,
    continue_,
    scope,  // {% generation %} body
  };
  kind type;
  source_pos pos;
  std::string text;
  expr_ptr e;
  expr_ptr cond;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<expr_ptr, body_t>> branches;
  body_t body;
  body_t else_body;
  std::vector<std::pair<std::string, expr_ptr>> params;
  std::vector<expr_ptr> filters;  // filter nodes with a null subject
};

}  // namespace tf::jinja
