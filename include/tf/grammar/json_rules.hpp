#pragma once
/// The JSON rules every schema grammar shares: whitespace (bounded, as llama.cpp's), string
/// characters (escapes and valid UTF-8 only), strings, numbers, integers and any JSON value.
#include <tf/grammar/grammar.hpp>

#include <cstdint>

namespace tf::grammar {

/// The shared rules' ids.
struct json_rules {
  std::int32_t ws = 0, char_ = 0, string = 0, number = 0, integer = 0, value = 0, object = 0,
               array = 0;
};

/// Adds the shared JSON rules to `g`.
inline json_rules add_json_rules(grammar& g) {
  json_rules r;
  // llama.cpp's: nothing, one space, or a newline and up to 20 of indent (never unbounded).
  auto indent = g.repeat({g.bytes(byte_set::of(" \t"))}, 0, 20);
  r.ws = g.rule({{}, g.literal(" "), {g.literal("\n")[0], grammar::ref(indent)}});
  byte_set plain = byte_set::range(0x20, 0x7F);
  plain.bits[0] &= ~(std::uint64_t{1} << '"');
  plain.bits[1] &= ~(std::uint64_t{1} << ('\\' - 64));
  auto cont = [&] { return g.bytes(byte_set::range(0x80, 0xBF)); };
  auto hex = [&] {
    auto h = byte_set::range('0', '9');
    h.add_range('a', 'f');
    h.add_range('A', 'F');
    return g.bytes(h);
  };
  auto one = [&](unsigned char lo, unsigned char hi) { return g.bytes(byte_set::range(lo, hi)); };
  auto e = g.literal("\\");
  r.char_ = g.rule({{g.bytes(plain)},
                    {e[0], g.bytes(byte_set::of("\"\\/bfnrt"))},
                    {e[0], g.literal("u")[0], hex(), hex(), hex(), hex()},
                    {one(0xC2, 0xDF), cont()},
                    {one(0xE0, 0xE0), one(0xA0, 0xBF), cont()},
                    {g.bytes([] {
                       auto b = byte_set::range(0xE1, 0xEC);
                       b.add_range(0xEE, 0xEF);
                       return b;
                     }()),
                     cont(), cont()},
                    {one(0xED, 0xED), one(0x80, 0x9F), cont()},
                    {one(0xF0, 0xF0), one(0x90, 0xBF), cont(), cont()},
                    {one(0xF1, 0xF3), cont(), cont(), cont()},
                    {one(0xF4, 0xF4), one(0x80, 0x8F), cont(), cont()}});
  auto q = g.literal("\"");
  r.string = g.rule({{q[0], grammar::ref(g.repeat({grammar::ref(r.char_)}, 0, -1)), q[0]}});
  auto digit = g.bytes(byte_set::range('0', '9'));
  auto minus = g.optional(g.literal("-"));
  auto natural = g.rule({g.literal("0"), {one('1', '9'), grammar::ref(g.repeat({digit}, 0, 15))}});
  r.integer = g.rule({{grammar::ref(minus), grammar::ref(natural)}});
  auto frac = g.optional({g.literal(".")[0], grammar::ref(g.repeat({digit}, 1, 16))});
  auto exp = g.optional({g.bytes(byte_set::of("eE")),
                         grammar::ref(g.optional({g.bytes(byte_set::of("+-"))})),
                         grammar::ref(g.repeat({digit}, 1, 2))});
  r.number = g.rule({{grammar::ref(r.integer), grammar::ref(frac), grammar::ref(exp)}});
  r.value = g.rule();
  auto const ws = grammar::ref(r.ws);
  sequence member = {grammar::ref(r.string), ws, g.literal(":")[0], ws, grammar::ref(r.value), ws};
  sequence more = g.literal(",");
  more.push_back(ws);
  more.insert(more.end(), member.begin(), member.end());
  auto members = member;
  members.push_back(grammar::ref(g.repeat(more, 0, -1)));
  r.object =
      g.rule({{g.literal("{")[0], ws, grammar::ref(g.optional(members)), g.literal("}")[0]}});
  sequence items = {grammar::ref(r.value), ws};
  sequence more_items = g.literal(",");
  more_items.insert(more_items.end(), {ws, grammar::ref(r.value), ws});
  items.push_back(grammar::ref(g.repeat(more_items, 0, -1)));
  r.array = g.rule({{g.literal("[")[0], ws, grammar::ref(g.optional(items)), g.literal("]")[0]}});
  g.define(r.value, {{grammar::ref(r.object)},
                     {grammar::ref(r.array)},
                     {grammar::ref(r.string)},
                     {grammar::ref(r.number)},
                     g.literal("true"),
                     g.literal("false"),
                     g.literal("null")});
  return r;
}

}  // namespace tf::grammar
