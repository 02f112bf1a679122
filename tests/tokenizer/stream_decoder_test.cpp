// Tests include/tf/tokenizer/stream_decoder.hpp: only whole UTF-8 characters come out.
#include <tf/tokenizer/stream_decoder.hpp>

#include "toy_vocab.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using tf::tokenizer::stream_decoder;
using tf::tokenizer::tokenizer;

namespace {

std::int32_t byte(const tokenizer& t, unsigned b) {
  return *t.token_id(fmt::format("<0x{:02X}>", b));
}

}  // namespace

TEST_CASE("a character split across byte tokens is emitted whole") {
  const tokenizer t(toy::spm());
  stream_decoder dec(t);
  CHECK(dec.feed(byte(t, 0xF0)).empty());
  CHECK(dec.feed(byte(t, 0x9F)).empty());
  CHECK(dec.feed(byte(t, 0x98)).empty());
  CHECK(dec.pending_bytes() == 3);
  CHECK(dec.feed(byte(t, 0x80)) == "\xF0\x9F\x98\x80");
  CHECK(dec.pending_bytes() == 0);
  CHECK(dec.feed(*t.token_id("hello")) == "hello");
  CHECK(dec.flush().empty());
}

TEST_CASE("streamed text equals decode for a mixed sequence") {
  const tokenizer t(toy::spm());
  const std::string text = "hello \xE2\x82\xAC\xC3\xA9 world\n\xF0\x9F\x91\x8D!";
  const auto ids = t.encode(text, true, true);
  stream_decoder dec(t);
  std::string out;
  for (const auto id : ids) out += dec.feed(id);
  out += dec.flush();
  CHECK(out == t.decode(ids));
  CHECK(out == text);
}

TEST_CASE("invalid bytes come out as U+FFFD and flush ends an unfinished character") {
  const tokenizer t(toy::spm());
  const std::string fffd = "\xEF\xBF\xBD";
  stream_decoder dec(t);
  CHECK(dec.feed(byte(t, 0x80)) == fffd);           // a stray continuation byte
  CHECK(dec.feed(byte(t, 0xE2)).empty());           // waits for more
  CHECK(dec.feed(*t.token_id("a")) == fffd + "a");  // broken by a non-continuation
  CHECK(dec.feed(byte(t, 0xC3)).empty());
  CHECK(dec.flush() == fffd);
  CHECK(dec.pending_bytes() == 0);
}

TEST_CASE("control tokens stream only when rendering specials") {
  const tokenizer t(toy::spm());
  stream_decoder quiet(t);
  stream_decoder loud(t, true);
  const auto eot = *t.token_id("<end_of_turn>");
  CHECK(quiet.feed(eot).empty());
  CHECK(loud.feed(eot) == "<end_of_turn>");
}
