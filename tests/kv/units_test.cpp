// Tests include/tf/kv/units.hpp: the census line and when a census balances.
#include <tf/kv/units.hpp>

#include <catch2/catch.hpp>

TEST_CASE("the stop census line has the exact form") {
  tf::kv::census c;
  c.free = 132;
  c.total = 132;
  CHECK(c.line() == "promised 0, free 132 + store 0 == total 132");
  CHECK(c.balanced());

  tf::kv::census h;
  h.free = 51;
  h.total = 51;
  h.has_slots = true;
  h.slots_free = 55;
  h.slots_held = 9;
  h.slots_store = 9;  // kept prompt states
  h.slots_total = 64;
  CHECK(h.line() == "promised 0, free 51 + store 0 == total 51; slots free 55 + held 9 == 64");
  CHECK(h.balanced());
}

TEST_CASE("a census that does not add up is not balanced") {
  tf::kv::census c;
  c.free = 130;
  c.store = 1;
  c.total = 132;  // one page lost
  CHECK_FALSE(c.consistent());
  CHECK_FALSE(c.balanced());
  c.store = 2;
  CHECK(c.balanced());
  c.ledger_promised_bytes = 64;  // the ledger still counts a promise nobody holds
  CHECK_FALSE(c.balanced());
  c.ledger_promised_bytes = 0;
  c.free = 100;
  c.held = 30;
  c.promised = 30;
  CHECK(c.consistent());      // streams running: pages add up
  CHECK_FALSE(c.balanced());  // but not at rest
  c.promised = 29;            // held more than promised: an over-promise
  CHECK_FALSE(c.consistent());

  tf::kv::census h;
  h.free = 4;
  h.total = 4;
  h.has_slots = true;
  h.slots_free = 3;
  h.slots_held = 0;
  h.slots_total = 4;  // a slot lost
  CHECK_FALSE(h.balanced());
  CHECK(h.line().ends_with("; slots free 3 + held 0 == 4"));
  h.slots_held = 1;  // a stream's slot, held at rest
  CHECK(h.consistent());
  CHECK_FALSE(h.balanced());
  h.slots_store = 1;  // a kept prompt's state: fine at rest
  CHECK(h.balanced());
}
