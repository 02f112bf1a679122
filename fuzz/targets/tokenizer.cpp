// Fuzzes the tokenizers: encode of arbitrary bytes and decode (whole and streamed) of arbitrary
// ids, over SentencePiece, byte-level BPE (each pre-tokenizer tf knows) and gemma4 vocabs. Byte 0
// picks the vocab, byte 1 the mode; the rest is the text, or little-endian int32 ids. Contract:
// encode never throws below 4 GiB; decode throws tf::error only for an id outside the vocab;
// stream_decoder returns valid UTF-8.
#include <tf/model/gguf.hpp>
#include <tf/tokenizer/from_gguf.hpp>
#include <tf/tokenizer/from_hf.hpp>
#include <tf/tokenizer/stream_decoder.hpp>
#include <tf/tokenizer/tokenizer.hpp>

#include <cstring>
#include <vector>

#include "../tests/tokenizer/toy_vocab.hpp"
#include "fuzz_common.hpp"

namespace {

std::vector<tf::tokenizer::tokenizer> const& vocabs() {
  static const std::vector<tf::tokenizer::tokenizer> v = [] {
    namespace tk = tf::tokenizer;
    std::vector<tk::tokenizer> out;
    out.emplace_back(toy::spm(false));
    out.emplace_back(toy::spm(true));
    out.emplace_back(toy::bpe("qwen2"));
    out.emplace_back(toy::spm_bpe());
    for (auto name : {"bpe_qwen2.gguf", "bpe_qwen35.gguf", "bpe_pixtral.gguf"})
      out.push_back(tk::load_tokenizer(
          tf::model::gguf_file::open(std::string(TF_FIXTURES_DIR) + "/tokenizer/" + name)));
    for (auto name : {"bpe_gpt2.tokenizer.json", "bpe_glm4.tokenizer.json"})
      out.push_back(tk::load_hf_tokenizer(std::string(TF_FIXTURES_DIR) + "/tokenizer/" + name));
    return out;
  }();
  return v;
}

bool valid_utf8(std::string const& s) {
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  auto const& tok = vocabs()[data[0] % vocabs().size()];
  std::uint8_t const mode = data[1];
  data += 2;
  size -= 2;
  auto const n = static_cast<std::int32_t>(tok.n_tokens());
  if ((mode & 1) == 0) {
    auto text = tf_fuzz::as_text(data, size);
    auto ids = tok.encode(text, (mode & 2) != 0, (mode & 4) != 0);
    for (auto id : ids) tf_fuzz::check(id >= 0 && id < n, "encode gives ids inside the vocab");
    (void)tok.decode(ids, (mode & 8) != 0);
    return 0;
  }
  std::vector<std::int32_t> ids(size / 4);
  for (std::size_t i = 0; i < ids.size(); ++i) std::memcpy(&ids[i], data + 4 * i, 4);
  bool const wrap = (mode & 2) != 0;  // half the inputs: ids folded into the vocab
  if (wrap)
    for (auto& id : ids) id = static_cast<std::int32_t>(static_cast<std::uint32_t>(id) % n);
  bool const special = (mode & 8) != 0;
  try {
    (void)tok.decode(ids, special);
    tf::tokenizer::stream_decoder sd(tok, special);
    std::string streamed;
    for (auto id : ids) {
      auto piece = sd.feed(id);
      if (!valid_utf8(piece)) {
        std::fprintf(stderr, "fuzz: token %d gave", id);
        for (unsigned char c : piece) std::fprintf(stderr, " %02x", c);
        std::fprintf(stderr, " (token text:");
        for (unsigned char c : tok.vocab().tokens[static_cast<std::size_t>(id)])
          std::fprintf(stderr, " %02x", c);
        std::fprintf(stderr, ")\n");
      }
      tf_fuzz::check(valid_utf8(piece), "stream_decoder gives valid UTF-8");
      streamed += piece;
    }
    auto rest = sd.flush();
    tf_fuzz::check(valid_utf8(rest), "stream_decoder flush gives valid UTF-8");
  } catch (tf::error const&) {
    tf_fuzz::check(!wrap, "decode of ids inside the vocab does not throw");
  }
  return 0;
}
