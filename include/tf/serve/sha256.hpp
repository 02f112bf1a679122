#pragma once
/// SHA-256 (FIPS 180-4) of bytes or of a token-id stream; replies carry it as "token_sha".
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tf::serve {

/// Incremental SHA-256; update() any number of times, then hex() once.
class sha256 {
 public:
  sha256() = default;

  /// Feeds bytes.
  void update(std::span<std::uint8_t const> bytes) {
    for (auto b : bytes) {
      block_[fill_++] = b;
      if (fill_ == 64) {
        compress();
        fill_ = 0;
      }
    }
    length_ += bytes.size();
  }

  /// Feeds the bytes of a string.
  void update(std::string_view s) {
    update(
        std::span<std::uint8_t const>(reinterpret_cast<std::uint8_t const*>(s.data()), s.size()));
  }

  /// Pads, finishes and returns the 32-byte digest; call once.
  std::array<std::uint8_t, 32> digest() {
    std::uint64_t const bits = length_ * 8;
    std::uint8_t const one = 0x80;
    update(std::span<std::uint8_t const>(&one, 1));
    std::uint8_t const zero = 0;
    while (fill_ != 56) update(std::span<std::uint8_t const>(&zero, 1));
    std::array<std::uint8_t, 8> len{};
    for (int i = 0; i < 8; ++i)
      len[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
    update(len);
    std::array<std::uint8_t, 32> out{};
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 4; ++j)
        out[i * 4 + j] = static_cast<std::uint8_t>(h_[i] >> (24 - 8 * j));
    return out;
  }

  /// The digest as 64 lowercase hex characters.
  std::string hex() {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    for (auto b : digest()) {
      s.push_back(digits[b >> 4]);
      s.push_back(digits[b & 15]);
    }
    return s;
  }

 private:
  static std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void compress() {
    static constexpr std::array<std::uint32_t, 64> k{
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    std::array<std::uint32_t, 64> w{};
    for (std::size_t i = 0; i < 16; ++i)
      w[i] = (std::uint32_t{block_[i * 4]} << 24) | (std::uint32_t{block_[i * 4 + 1]} << 16) |
             (std::uint32_t{block_[i * 4 + 2]} << 8) | std::uint32_t{block_[i * 4 + 3]};
    for (std::size_t i = 16; i < 64; ++i) {
      auto s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      auto s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    auto v = h_;
    for (std::size_t i = 0; i < 64; ++i) {
      auto s1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
      auto ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
      auto t1 = v[7] + s1 + ch + k[i] + w[i];
      auto s0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
      auto mj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
      auto t2 = s0 + mj;
      v = {t1 + t2, v[0], v[1], v[2], v[3] + t1, v[4], v[5], v[6]};
    }
    for (std::size_t i = 0; i < 8; ++i) h_[i] += v[i];
  }

  std::array<std::uint32_t, 8> h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<std::uint8_t, 64> block_{};
  std::size_t fill_ = 0;
  std::uint64_t length_ = 0;
};

/// SHA-256 hex of a string.
inline std::string sha256_hex(std::string_view s) {
  sha256 h;
  h.update(s);
  return h.hex();
}

/// SHA-256 hex of token ids, each as 4 little-endian bytes (so any client can recompute it).
inline std::string token_sha(std::span<std::int32_t const> tokens) {
  sha256 h;
  for (auto t : tokens) {
    auto u = static_cast<std::uint32_t>(t);
    std::array<std::uint8_t, 4> b{static_cast<std::uint8_t>(u), static_cast<std::uint8_t>(u >> 8),
                                  static_cast<std::uint8_t>(u >> 16),
                                  static_cast<std::uint8_t>(u >> 24)};
    h.update(b);
  }
  return h.hex();
}

}  // namespace tf::serve
