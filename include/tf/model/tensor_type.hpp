#pragma once
/// Tensor element types as GGUF numbers them, with their block shapes (elements, bytes per block).
#include <tf/error.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tf::model {

enum class tensor_type : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  bf16 = 30,
};

/// Elements per super-block of the K-quants.
inline constexpr int qk_k = 256;

struct type_traits {
  tensor_type type;
  std::string_view name;
  int block_elems;  // elements per block
  int block_bytes;  // bytes per block
};

// One type per row.
// clang-format off
inline constexpr std::array<type_traits, 20> type_table{{
    {tensor_type::f32, "F32", 1, 4},
    {tensor_type::f16, "F16", 1, 2},
    {tensor_type::q4_0, "Q4_0", 32, 18},
    {tensor_type::q4_1, "Q4_1", 32, 20},
    {tensor_type::q5_0, "Q5_0", 32, 22},
    {tensor_type::q5_1, "Q5_1", 32, 24},
    {tensor_type::q8_0, "Q8_0", 32, 34},
    {tensor_type::q8_1, "Q8_1", 32, 36},
    {tensor_type::q2_k, "Q2_K", qk_k, 84},
    {tensor_type::q3_k, "Q3_K", qk_k, 110},
    {tensor_type::q4_k, "Q4_K", qk_k, 144},
    {tensor_type::q5_k, "Q5_K", qk_k, 176},
    {tensor_type::q6_k, "Q6_K", qk_k, 210},
    {tensor_type::q8_k, "Q8_K", qk_k, 292},
    {tensor_type::i8, "I8", 1, 1},
    {tensor_type::i16, "I16", 1, 2},
    {tensor_type::i32, "I32", 1, 4},
    {tensor_type::i64, "I64", 1, 8},
    {tensor_type::f64, "F64", 1, 8},
    {tensor_type::bf16, "BF16", 1, 2},
}};
// clang-format on

/// The traits of a GGUF type number, or nothing for a number tf does not know.
constexpr std::optional<type_traits> find_type(std::uint32_t id) {
  for (auto const& t : type_table)
    if (static_cast<std::uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

constexpr type_traits traits_of(tensor_type t) {
  auto found = find_type(static_cast<std::uint32_t>(t));
  if (!found) throw error("tf: unknown tensor type {}", static_cast<std::uint32_t>(t));
  return *found;
}

/// Bytes of one row of `n` elements; throws if `n` is not a whole number of blocks.
constexpr std::uint64_t row_bytes(tensor_type t, std::uint64_t n) {
  auto tr = traits_of(t);
  if (n % static_cast<std::uint64_t>(tr.block_elems) != 0)
    throw error("tf: a {} row of {} elements is not a whole number of {}-element blocks", tr.name,
                n, tr.block_elems);
  return n / static_cast<std::uint64_t>(tr.block_elems) *
         static_cast<std::uint64_t>(tr.block_bytes);
}

}  // namespace tf::model
