#pragma once
/// A small portable PRNG (xoshiro256**, seeded through splitmix64): the same seed gives the same
/// stream on every platform and library, unlike std:: distributions.
#include <cstdint>

namespace tf::sample {

/// One request's random stream.
class rng {
 public:
  explicit rng(std::uint64_t seed) {
    for (auto& s : s_) s = splitmix(seed);
  }

  /// The next 64 random bits.
  std::uint64_t next() {
    std::uint64_t const out = rotl(s_[1] * 5, 7) * 9;
    std::uint64_t const t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return out;
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
};

}  // namespace tf::sample
