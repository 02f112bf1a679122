// Tests include/tf/backend/cpu/zeroed_array.hpp: zeros until written, moves hand the memory
// over, and an array larger than the machine's memory can be reserved (nothing is touched).
#include <tf/backend/cpu/zeroed_array.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>

using tf::backend::cpu_parts::zeroed_array;

TEST_CASE("a zeroed array reads zeros until written; a move hands it over") {
  zeroed_array<float> a(1 << 20);
  REQUIRE(a.size() == (1u << 20));
  REQUIRE(a.data() != nullptr);
  CHECK(a.data()[0] == 0.0f);
  CHECK(a.data()[(1 << 20) - 1] == 0.0f);
  a.data()[12345] = 2.5f;
  auto* const p = a.data();
  zeroed_array<float> b(std::move(a));
  CHECK(a.data() == nullptr);
  CHECK(a.size() == 0);
  CHECK(b.data() == p);
  CHECK(b.data()[12345] == 2.5f);
  zeroed_array<float> c;
  c = std::move(b);
  CHECK(c.data()[12345] == 2.5f);
  CHECK(zeroed_array<std::uint16_t>(0).data() == nullptr);
}

TEST_CASE("reserving more than is resident costs nothing until written") {
  // 8 GiB of address space: MAP_NORESERVE commits none of it; only the two written pages count.
  zeroed_array<std::uint16_t> big(std::size_t{4} << 30);
  REQUIRE(big.data() != nullptr);
  big.data()[0] = 7;
  big.data()[(std::size_t{4} << 30) - 1] = 9;
  CHECK(big.data()[0] == 7);
  CHECK(big.data()[(std::size_t{4} << 30) - 1] == 9);
}
