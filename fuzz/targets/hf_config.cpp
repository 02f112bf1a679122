// Fuzzes what a Hugging Face folder's JSON goes through: config.json into each family's
// hyper-parameter reader, and tokenizer.json/tokenizer_config.json into the vocab reader.
// Contract: tf::error, or nlohmann::json's own exceptions for a value of the wrong JSON type
// (both reach the user as a start-up error); a signal, sanitizer report or other exception is a
// finding.
#include <families/gemma/gemma3_config.hpp>
#include <families/glm/glm4_config.hpp>
#include <families/glm/glm4_moe_config.hpp>
#include <families/nemotron/nemotron_h_config.hpp>
#include <families/qwen/qwen35_config.hpp>
#include <families/qwen/qwen3_config.hpp>
#include <families/qwen/qwen3_moe_config.hpp>
#include <families/qwen/qwen3_next_config.hpp>
#include <tf/error.hpp>
#include <tf/tokenizer/from_hf.hpp>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"

namespace {

template <class Fn>
void guarded(Fn&& fn) {
  try {
    fn();
  } catch (tf::error const&) {
  } catch (nlohmann::json::exception const&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto const j = nlohmann::json::parse(tf_fuzz::as_text(data, size), nullptr, false);
  if (j.is_discarded()) return 0;
  guarded([&] { (void)tf::families::gemma::hparams_from_config(j); });
  guarded([&] { (void)tf::families::qwen::hparams_from_config(j); });
  guarded([&] { (void)tf::families::qwen::moe_hparams_from_config(j); });
  guarded([&] { (void)tf::families::glm::hparams_from_config(j); });
  guarded([&] { (void)tf::families::glm::moe_hparams_from_config(j); });
  guarded([&] { (void)tf::families::qwen::qwen35_hparams_from_config(j); });
  guarded([&] { (void)tf::families::qwen::qwen3_next_hparams_from_config(j); });
  guarded([&] { (void)tf::families::nemotron::hparams_from_config(j); });
  guarded([&] {
    tf::tokenizer::tokenizer tok(tf::tokenizer::vocab_from_hf_json(j, j));
    auto ids = tok.encode("Hello, world! \xF0\x9F\x98\x80 <|im_end|>", true, true);
    (void)tok.decode(ids, true);
  });
  return 0;
}
