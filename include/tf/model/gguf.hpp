#pragma once
/// gguf_file: a GGUF v2/v3 file, memory-mapped and validated up front (header, metadata, tensors).
#include <tf/error.hpp>
#include <tf/model/detail/byte_cursor.hpp>
#include <tf/model/detail/mapped_bytes.hpp>
#include <tf/model/load_mode.hpp>
#include <tf/model/tensor_type.hpp>
#include <tf/model/tensor_view.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tf::model {

/// GGUF metadata value types, numbered as the file stores them.
enum class gguf_type : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

/// The GGUF spelling of a metadata type ("u32", "string", ...).
constexpr std::string_view gguf_type_name(gguf_type t) {
  constexpr std::string_view names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<std::uint32_t>(t);
  return i < std::size(names) ? names[i] : std::string_view("unknown");
}

/// Bytes of one scalar value of type `t`; 0 for string and array (variable length).
constexpr std::size_t gguf_scalar_bytes(gguf_type t) {
  switch (t) {
    case gguf_type::u8:
    case gguf_type::i8:
    case gguf_type::boolean:
      return 1;
    case gguf_type::u16:
    case gguf_type::i16:
      return 2;
    case gguf_type::u32:
    case gguf_type::i32:
    case gguf_type::f32:
      return 4;
    case gguf_type::u64:
    case gguf_type::i64:
    case gguf_type::f64:
      return 8;
    default:
      return 0;
  }
}

/// True for the integer types (not bool).
constexpr bool gguf_is_int(gguf_type t) {
  return t == gguf_type::u8 || t == gguf_type::i8 || t == gguf_type::u16 || t == gguf_type::i16 ||
         t == gguf_type::u32 || t == gguf_type::i32 || t == gguf_type::u64 || t == gguf_type::i64;
}

/// One metadata entry; `value_offset` is where its value starts in the file (for an array: its
/// first element, after the element type and count).
struct gguf_kv {
  std::string_view key;
  gguf_type type{};
  gguf_type elem_type{};    // arrays only
  std::uint64_t count = 0;  // arrays only
  std::size_t value_offset = 0;
};

class gguf_file {
 public:
  /// Maps (or reads, per `mode`) and validates `path`; throws tf::error naming the byte offset
  /// and what was expected.
  static gguf_file open(const std::filesystem::path& path, load_mode mode = load_mode::map) {
    return gguf_file(detail::mapped_bytes::load(path, mode), path.string());
  }
  /// Validates an in-memory copy (for tests and fuzzing).
  static gguf_file from_bytes(std::vector<std::byte> bytes) {
    return gguf_file(detail::mapped_bytes::own(std::move(bytes)), "gguf bytes");
  }

  gguf_file(gguf_file&&) noexcept = default;
  gguf_file& operator=(gguf_file&&) noexcept = default;
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;

  std::uint32_t version() const { return version_; }
  /// general.architecture, or empty if the file has none.
  std::string_view architecture() const { return get_string("general.architecture").value_or(""); }
  /// general.alignment (default 32).
  std::uint64_t alignment() const { return alignment_; }
  /// Byte offset of the tensor data section.
  std::uint64_t data_offset() const { return data_offset_; }
  std::size_t file_size() const { return bytes_.size(); }
  const std::string& source() const { return source_; }

  const std::vector<tensor_view>& tensors() const { return tensors_; }
  const tensor_view* find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
  }

  /// The layout rewrite_tensor gave tensor `t`, or empty for the file's own row order.
  std::string_view layout_of(const tensor_view& t) const {
    auto it = layouts_.find(index_of(t));
    return it == layouts_.end() ? std::string_view{} : std::string_view(it->second);
  }
  /// Rewrites t's bytes in place into layout `tag` by fn(std::byte* data), once: a later call with
  /// the same tag returns true at once. Only a file read into memory is rewritten (a mapping is
  /// the page cache's), so it returns false for a mapped file. Throws if t holds another layout.
  /// Whoever reads t's bytes checks layout_of first. Not for two threads binding one file.
  template <class Fn>
  bool rewrite_tensor(const tensor_view& t, std::string_view tag, Fn&& fn) const {
    auto const i = index_of(t);
    if (auto it = layouts_.find(i); it != layouts_.end()) {
      if (it->second != tag)
        throw error("tf: {}: tensor {} is already in layout {}, not {}", source_, t.name,
                    it->second, tag);
      return true;
    }
    // The bytes are this object's own copy; rewrite() declines a file mapping.
    auto& bytes = const_cast<detail::mapped_bytes&>(bytes_);
    if (!bytes.rewrite(static_cast<std::size_t>(t.data - bytes_.data()), t.bytes, fn)) return false;
    layouts_.emplace(i, std::string(tag));
    return true;
  }

  /// Every metadata entry in file order.
  const std::vector<gguf_kv>& metadata() const { return kvs_; }
  const gguf_kv* find_kv(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kvs_[it->second];
  }
  bool has(std::string_view key) const { return find_kv(key) != nullptr; }

  /// A string value; throws if `key` holds another type.
  std::optional<std::string_view> get_string(std::string_view key) const {
    auto kv = find_kv(key);
    if (!kv) return std::nullopt;
    expect(*kv, kv->type == gguf_type::string, "a string");
    return string_at(kv->value_offset);
  }
  /// Any integer type; throws for other types or a u64 beyond int64.
  std::optional<std::int64_t> get_int(std::string_view key) const {
    auto kv = find_kv(key);
    if (!kv) return std::nullopt;
    expect(*kv, gguf_is_int(kv->type), "an integer");
    return int_at(*kv, kv->type, kv->value_offset);
  }
  /// f32/f64, or an integer converted.
  std::optional<double> get_float(std::string_view key) const {
    auto kv = find_kv(key);
    if (!kv) return std::nullopt;
    expect(*kv, kv->type == gguf_type::f32 || kv->type == gguf_type::f64 || gguf_is_int(kv->type),
           "a number");
    return float_at(*kv, kv->type, kv->value_offset);
  }
  std::optional<bool> get_bool(std::string_view key) const {
    auto kv = find_kv(key);
    if (!kv) return std::nullopt;
    expect(*kv, kv->type == gguf_type::boolean, "a bool");
    return read_at<std::uint8_t>(kv->value_offset) != 0;
  }
  /// A string array as views into the mapping; empty if `key` is absent.
  std::vector<std::string_view> get_string_array(std::string_view key) const {
    std::vector<std::string_view> out;
    auto kv = find_kv(key);
    if (!kv) return out;
    expect(*kv, kv->type == gguf_type::array && kv->elem_type == gguf_type::string,
           "an array of strings");
    out.reserve(static_cast<std::size_t>(kv->count));
    auto at = kv->value_offset;
    for (std::uint64_t i = 0; i < kv->count; ++i) {
      auto s = string_at(at);
      out.push_back(s);
      at += 8 + s.size();
    }
    return out;
  }
  /// A bool array; empty if `key` is absent.
  std::vector<bool> get_bool_array(std::string_view key) const {
    std::vector<bool> out;
    auto kv = find_kv(key);
    if (!kv) return out;
    expect(*kv, kv->type == gguf_type::array && kv->elem_type == gguf_type::boolean,
           "an array of bools");
    for (std::uint64_t i = 0; i < kv->count; ++i)
      out.push_back(read_at<std::uint8_t>(kv->value_offset + static_cast<std::size_t>(i)) != 0);
    return out;
  }
  /// A numeric array as floats; empty if `key` is absent.
  std::vector<float> get_float_array(std::string_view key) const {
    std::vector<float> out;
    auto kv = find_kv(key);
    if (!kv) return out;
    expect(*kv,
           kv->type == gguf_type::array &&
               (kv->elem_type == gguf_type::f32 || kv->elem_type == gguf_type::f64 ||
                gguf_is_int(kv->elem_type)),
           "an array of numbers");
    auto step = gguf_scalar_bytes(kv->elem_type);
    out.reserve(static_cast<std::size_t>(kv->count));
    for (std::uint64_t i = 0; i < kv->count; ++i)
      out.push_back(static_cast<float>(
          float_at(*kv, kv->elem_type, kv->value_offset + static_cast<std::size_t>(i) * step)));
    return out;
  }
  /// An integer array; empty if `key` is absent.
  std::vector<std::int64_t> get_int_array(std::string_view key) const {
    std::vector<std::int64_t> out;
    auto kv = find_kv(key);
    if (!kv) return out;
    expect(*kv, kv->type == gguf_type::array && gguf_is_int(kv->elem_type), "an array of integers");
    auto step = gguf_scalar_bytes(kv->elem_type);
    out.reserve(static_cast<std::size_t>(kv->count));
    for (std::uint64_t i = 0; i < kv->count; ++i)
      out.push_back(
          int_at(*kv, kv->elem_type, kv->value_offset + static_cast<std::size_t>(i) * step));
    return out;
  }

  /// A short rendering of a value for listings: scalars in full, strings cut at `max_chars`,
  /// arrays as their type and length plus the first `max_items` elements.
  std::string render(const gguf_kv& kv, std::size_t max_items = 4,
                     std::size_t max_chars = 60) const {
    if (kv.type != gguf_type::array) return render_scalar(kv.type, kv.value_offset, max_chars);
    std::string out = fmt::format("[{} x {}]", gguf_type_name(kv.elem_type), kv.count);
    if (kv.elem_type == gguf_type::array) return out;
    auto at = kv.value_offset;
    std::uint64_t shown = std::min<std::uint64_t>(kv.count, max_items);
    for (std::uint64_t i = 0; i < shown; ++i) {
      out += i == 0 ? " " : ", ";
      out += render_scalar(kv.elem_type, at, max_chars / 2);
      at += kv.elem_type == gguf_type::string ? 8 + string_at(at).size()
                                              : gguf_scalar_bytes(kv.elem_type);
    }
    if (kv.count > shown) out += ", ...";
    return out;
  }

 private:
  static constexpr std::uint32_t magic_ = 0x46554747;  // "GGUF" little-endian
  static constexpr int max_depth_ = 8;                 // nested arrays deeper than this are refused
  static constexpr std::uint32_t max_dims_ = 4;

  gguf_file(detail::mapped_bytes bytes, std::string source)
      : bytes_(std::move(bytes)), source_(std::move(source)) {
    parse();
  }

  void parse() {
    detail::byte_cursor c(bytes_.data(), bytes_.size(), 0, source_);
    auto magic = c.read<std::uint32_t>("the GGUF magic");
    if (magic != magic_)
      c.fail_at(0, "expected the magic \"GGUF\" (0x46554747), found 0x{:08x}", magic);
    version_ = c.read<std::uint32_t>("the GGUF version");
    if (version_ != 2 && version_ != 3)
      c.fail_at(4, "expected GGUF version 2 or 3, found {}", version_);
    auto n_tensors_at = c.pos();
    auto n_tensors = c.read<std::uint64_t>("the tensor count");
    auto n_kv_at = c.pos();
    auto n_kv = c.read<std::uint64_t>("the metadata count");
    // A tensor info takes at least 24 bytes and a metadata entry at least 13.
    if (n_tensors > c.remaining() / 24)
      c.fail_at(n_tensors_at, "expected a tensor count the file can hold (at most {}), found {}",
                c.remaining() / 24, n_tensors);
    if (n_kv > c.remaining() / 13)
      c.fail_at(n_kv_at, "expected a metadata count the file can hold (at most {}), found {}",
                c.remaining() / 13, n_kv);

    kvs_.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      auto key_at = c.pos();
      gguf_kv kv;
      kv.key = c.read_string("a metadata key");
      kv.type = read_type(c, "a metadata value type");
      if (kv.type == gguf_type::array) {
        kv.elem_type = read_type(c, "an array element type");
        kv.count = read_count(c, kv.elem_type);
        kv.value_offset = c.pos();
        skip_elems(c, kv.elem_type, kv.count, 1);
      } else {
        kv.value_offset = c.pos();
        skip_value(c, kv.type, 0);
      }
      if (!kv_index_.emplace(kv.key, kvs_.size()).second)
        c.fail_at(key_at, "expected unique metadata keys, found \"{}\" twice", kv.key);
      kvs_.push_back(kv);
    }

    if (auto kv = find_kv("general.alignment")) {
      if (kv->type != gguf_type::u32)
        fail_kv(*kv, "expected general.alignment as u32, found {}", gguf_type_name(kv->type));
      auto a = read_at<std::uint32_t>(kv->value_offset);
      if (a == 0 || (a & (a - 1)) != 0)
        fail_kv(*kv, "expected general.alignment to be a power of two, found {}", a);
      alignment_ = a;
    }
    if (auto kv = find_kv("general.architecture"); kv && kv->type != gguf_type::string)
      fail_kv(*kv, "expected general.architecture as a string, found {}", gguf_type_name(kv->type));

    struct pending {
      std::size_t info_at;
      std::uint64_t offset;
    };
    std::vector<pending> where;
    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    where.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
      auto info_at = c.pos();
      tensor_view t;
      t.name = std::string(c.read_string("a tensor name"));
      auto dims_at = c.pos();
      auto n_dims = c.read<std::uint32_t>("a tensor's dimension count");
      if (n_dims == 0 || n_dims > max_dims_)
        c.fail_at(dims_at, "expected 1 to {} dimensions for tensor \"{}\", found {}", max_dims_,
                  t.name, n_dims);
      std::uint64_t elems = 1;
      for (std::uint32_t d = 0; d < n_dims; ++d) {
        auto dim_at = c.pos();
        auto dim = c.read<std::uint64_t>("a tensor dimension");
        if (dim == 0 || dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          c.fail_at(dim_at, "expected dimension {} of tensor \"{}\" in 1..2^63-1, found {}", d,
                    t.name, dim);
        if (elems > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / dim)
          c.fail_at(dim_at, "expected the element count of tensor \"{}\" to fit in int64", t.name);
        elems *= dim;
        t.dims.push_back(static_cast<std::int64_t>(dim));
      }
      auto type_at = c.pos();
      auto type_id = c.read<std::uint32_t>("a tensor type");
      auto tr = find_type(type_id);
      if (!tr)
        c.fail_at(type_at, "expected a known tensor type for \"{}\", found type number {}", t.name,
                  type_id);
      t.type = tr->type;
      auto row = static_cast<std::uint64_t>(t.dims[0]);
      if (row % static_cast<std::uint64_t>(tr->block_elems) != 0)
        c.fail_at(dims_at,
                  "expected the row length of {} tensor \"{}\" to be a multiple of {}, found {}",
                  tr->name, t.name, tr->block_elems, row);
      auto blocks = elems / static_cast<std::uint64_t>(tr->block_elems);
      if (blocks >
          std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(tr->block_bytes))
        c.fail_at(dims_at, "expected the byte size of tensor \"{}\" to fit in 64 bits", t.name);
      t.bytes = blocks * static_cast<std::uint64_t>(tr->block_bytes);
      auto off_at = c.pos();
      auto off = c.read<std::uint64_t>("a tensor data offset");
      if (off % alignment_ != 0)
        c.fail_at(off_at,
                  "expected the data offset of tensor \"{}\" to be a multiple of {}, found {}",
                  t.name, alignment_, off);
      where.push_back({info_at, off});
      tensors_.push_back(std::move(t));
    }

    // The data section starts at the next multiple of the alignment after the tensor infos.
    std::uint64_t end = c.pos();
    data_offset_ = (end + alignment_ - 1) / alignment_ * alignment_;
    if (n_tensors > 0 && data_offset_ > bytes_.size())
      c.fail_at(end, "expected tensor data from byte {}, but the file has {} bytes", data_offset_,
                bytes_.size());
    auto data_bytes = n_tensors > 0 ? bytes_.size() - data_offset_ : 0;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      auto& t = tensors_[i];
      auto off = where[i].offset;
      if (off > data_bytes || t.bytes > data_bytes - off)
        c.fail_at(
            where[i].info_at,
            "expected tensor \"{}\" ({} bytes at data offset {}) to lie inside the {} data bytes",
            t.name, t.bytes, off, data_bytes);
      t.offset = data_offset_ + off;
      t.data = bytes_.data() + t.offset;
    }
    // Name index after the vector is final, so views stay valid.
    for (std::size_t i = 0; i < tensors_.size(); ++i)
      if (!tensor_index_.emplace(tensors_[i].name, i).second)
        c.fail_at(where[i].info_at, "expected unique tensor names, found \"{}\" twice",
                  tensors_[i].name);
    std::vector<std::size_t> order(tensors_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](auto a, auto b) { return tensors_[a].offset < tensors_[b].offset; });
    for (std::size_t k = 1; k < order.size(); ++k) {
      auto const& prev = tensors_[order[k - 1]];
      auto const& cur = tensors_[order[k]];
      if (cur.offset < prev.offset + prev.bytes)
        c.fail_at(where[order[k]].info_at,
                  "expected tensor \"{}\" at byte {} not to overlap \"{}\" (bytes {}..{})",
                  cur.name, cur.offset, prev.name, prev.offset, prev.offset + prev.bytes);
    }
  }

  static gguf_type read_type(detail::byte_cursor& c, std::string_view what) {
    auto at = c.pos();
    auto t = c.read<std::uint32_t>(what);
    if (t > static_cast<std::uint32_t>(gguf_type::f64))
      c.fail_at(at, "expected {} (0..12), found {}", what, t);
    return static_cast<gguf_type>(t);
  }

  static std::uint64_t read_count(detail::byte_cursor& c, gguf_type elem) {
    auto at = c.pos();
    auto n = c.read<std::uint64_t>("an array length");
    // Strings take at least 8 bytes each, nested arrays 12; scalars their size.
    std::uint64_t min = elem == gguf_type::string  ? 8
                        : elem == gguf_type::array ? 12
                                                   : gguf_scalar_bytes(elem);
    if (n > c.remaining() / min)
      c.fail_at(at, "expected an array length the file can hold (at most {} {} values), found {}",
                c.remaining() / min, gguf_type_name(elem), n);
    return n;
  }

  static void skip_elems(detail::byte_cursor& c, gguf_type elem, std::uint64_t n, int depth) {
    if (auto sz = gguf_scalar_bytes(elem); sz > 0) {
      if (elem == gguf_type::boolean) {
        for (std::uint64_t i = 0; i < n; ++i) skip_value(c, elem, depth);
      } else {
        c.skip(n * sz, "array values");
      }
      return;
    }
    for (std::uint64_t i = 0; i < n; ++i) skip_value(c, elem, depth);
  }

  static void skip_value(detail::byte_cursor& c, gguf_type t, int depth) {
    auto at = c.pos();
    switch (t) {
      case gguf_type::string:
        c.read_string("a string value");
        return;
      case gguf_type::boolean: {
        auto b = c.read<std::uint8_t>("a bool value");
        if (b > 1) c.fail_at(at, "expected a bool (0 or 1), found {}", b);
        return;
      }
      case gguf_type::array: {
        if (depth >= max_depth_)
          c.fail_at(at, "expected arrays nested at most {} deep", max_depth_);
        auto elem = read_type(c, "an array element type");
        auto n = read_count(c, elem);
        skip_elems(c, elem, n, depth + 1);
        return;
      }
      default:
        c.skip(gguf_scalar_bytes(t), "a scalar value");
        return;
    }
  }

  template <class T>
  T read_at(std::size_t at) const {
    detail::byte_cursor c(bytes_.data(), bytes_.size(), at, source_);
    return c.read<T>("a value");
  }
  std::string_view string_at(std::size_t at) const {
    detail::byte_cursor c(bytes_.data(), bytes_.size(), at, source_);
    return c.read_string("a string");
  }

  std::int64_t int_at(const gguf_kv& kv, gguf_type t, std::size_t at) const {
    switch (t) {
      case gguf_type::u8:
        return read_at<std::uint8_t>(at);
      case gguf_type::i8:
        return read_at<std::int8_t>(at);
      case gguf_type::u16:
        return read_at<std::uint16_t>(at);
      case gguf_type::i16:
        return read_at<std::int16_t>(at);
      case gguf_type::u32:
        return read_at<std::uint32_t>(at);
      case gguf_type::i32:
        return read_at<std::int32_t>(at);
      case gguf_type::i64:
        return read_at<std::int64_t>(at);
      case gguf_type::u64: {
        auto v = read_at<std::uint64_t>(at);
        if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          fail_kv(kv, "expected \"{}\" to fit in int64, found {}", kv.key, v);
        return static_cast<std::int64_t>(v);
      }
      default:
        fail_kv(kv, "expected an integer, found {}", gguf_type_name(t));
    }
  }
  double float_at(const gguf_kv& kv, gguf_type t, std::size_t at) const {
    if (t == gguf_type::f32) return read_at<float>(at);
    if (t == gguf_type::f64) return read_at<double>(at);
    if (t == gguf_type::u64) return static_cast<double>(read_at<std::uint64_t>(at));
    return static_cast<double>(int_at(kv, t, at));
  }

  std::string render_scalar(gguf_type t, std::size_t at, std::size_t max_chars) const {
    switch (t) {
      case gguf_type::string: {
        auto s = string_at(at);
        std::string out;
        for (char ch : s.substr(0, max_chars)) {
          if (ch == '\n')
            out += "\\n";
          else if (static_cast<unsigned char>(ch) < 0x20)
            out += '?';
          else
            out += ch;
        }
        return fmt::format("\"{}{}\"", out, s.size() > max_chars ? "..." : "");
      }
      case gguf_type::boolean:
        return read_at<std::uint8_t>(at) ? "true" : "false";
      case gguf_type::f32:
        return fmt::format("{}", read_at<float>(at));
      case gguf_type::f64:
        return fmt::format("{}", read_at<double>(at));
      case gguf_type::u64:
        return fmt::format("{}", read_at<std::uint64_t>(at));
      default:
        return fmt::format("{}", int_at(gguf_kv{}, t, at));
    }
  }

  void expect(const gguf_kv& kv, bool ok, std::string_view what) const {
    if (!ok)
      fail_kv(
          kv, "expected \"{}\" to be {}, found {}{}", kv.key, what, gguf_type_name(kv.type),
          kv.type == gguf_type::array ? fmt::format(" of {}", gguf_type_name(kv.elem_type)) : "");
  }
  template <class... Args>
  [[noreturn]] void fail_kv(const gguf_kv& kv, fmt::format_string<Args...> f,
                            Args&&... args) const {
    throw error("tf: {}: at byte {}: {}", source_, kv.value_offset,
                fmt::format(f, std::forward<Args>(args)...));
  }

  std::size_t index_of(const tensor_view& t) const {
    if (tensors_.empty() || &t < tensors_.data() || &t >= tensors_.data() + tensors_.size())
      throw error("tf: {}: tensor {} is not one of this file's", source_, t.name);
    return static_cast<std::size_t>(&t - tensors_.data());
  }

  detail::mapped_bytes bytes_;
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<gguf_kv> kvs_;
  std::unordered_map<std::string_view, std::size_t> kv_index_;
  std::vector<tensor_view> tensors_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;
  mutable std::unordered_map<std::size_t, std::string> layouts_;  // by tensor index
};

}  // namespace tf::model
