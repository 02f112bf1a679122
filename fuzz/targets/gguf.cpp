// Fuzzes the GGUF reader (header, metadata, tensor infos, offsets and sizes), every typed getter
// on what it accepted, the tokenizer built from its tokenizer.ggml.* keys, and the families'
// hyper-parameter readers. Contract: tf::error for any malformed file.
#include <families/gemma/gemma3_config.hpp>
#include <families/glm/glm4_config.hpp>
#include <families/glm/glm4_moe_config.hpp>
#include <families/nemotron/nemotron_h_config.hpp>
#include <families/qwen/qwen35_config.hpp>
#include <families/qwen/qwen3_config.hpp>
#include <families/qwen/qwen3_moe_config.hpp>
#include <families/qwen/qwen3_next_config.hpp>
#include <tf/error.hpp>
#include <tf/model/gguf.hpp>
#include <tf/tokenizer/from_gguf.hpp>

#include <cstring>
#include <vector>

#include "fuzz_common.hpp"

namespace {

template <class Fn>
void guarded(Fn&& fn) {
  try {
    fn();
  } catch (tf::error const&) {
  }
}

void read_all(tf::model::gguf_file const& g) {
  using tf::model::gguf_type;
  for (auto const& kv : g.metadata()) {
    (void)g.render(kv);
    guarded([&] { (void)g.get_string(kv.key); });
    guarded([&] { (void)g.get_int(kv.key); });
    guarded([&] { (void)g.get_float(kv.key); });
    guarded([&] { (void)g.get_bool(kv.key); });
    guarded([&] { (void)g.get_string_array(kv.key); });
    guarded([&] { (void)g.get_float_array(kv.key); });
    guarded([&] { (void)g.get_int_array(kv.key); });
  }
  for (auto const& t : g.tensors()) {
    tf_fuzz::check(g.find_tensor(t.name) == &t, "find_tensor finds each tensor");
    tf_fuzz::check(t.offset + t.bytes <= g.file_size(), "tensor bytes inside the file");
    // Touch the first and last byte: ASan checks they are inside the buffer.
    if (t.bytes > 0) {
      volatile auto first = t.data[0];
      volatile auto last = t.data[t.bytes - 1];
      (void)first;
      (void)last;
    }
  }
  guarded([&] {
    auto tok = tf::tokenizer::load_tokenizer(g);
    auto ids = tok.encode("Hello, world! <s>\n\xE2\x96\x81x \xF0\x9F\x98\x80", true, true);
    (void)tok.decode(ids, true);
  });
  guarded([&] { (void)tf::families::gemma::hparams_from_gguf(g); });
  guarded([&] { (void)tf::families::qwen::hparams_from_gguf(g); });
  guarded([&] { (void)tf::families::qwen::moe_hparams_from_gguf(g); });
  guarded([&] { (void)tf::families::glm::hparams_from_gguf(g); });
  guarded([&] { (void)tf::families::glm::moe_hparams_from_gguf(g); });
  guarded([&] { (void)tf::families::qwen::qwen35_hparams_from_gguf(g); });
  guarded([&] { (void)tf::families::qwen::qwen3_next_hparams_from_gguf(g); });
  guarded([&] { (void)tf::families::nemotron::hparams_from_gguf(g); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size) std::memcpy(bytes.data(), data, size);
  try {
    auto g = tf::model::gguf_file::from_bytes(std::move(bytes));
    read_all(g);
  } catch (tf::error const&) {
  }
  return 0;
}
