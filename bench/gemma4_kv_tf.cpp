// tf's KV bytes per token of context for a Gemma 4 GGUF (what the ledger's pages, the start-up
// line and the memory budget count), f16 and f32, for bench/gemma4_kv.py. Usage: gemma4_kv_tf
// MODEL.gguf
#include <families/gemma/gemma4.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/engine/engine.hpp>

#include <fmt/format.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} MODEL.gguf\n", argv[0]);
    return 2;
  }
  using engine = tf::engine<tf::families::gemma::gemma4, tf::backend::cpu>;
  auto const file = tf::model::model_file::open(argv[1]);
  fmt::print("f16 {}\nf32 {}\n", engine::kv_bytes_per_token(file, tf::kv_dtype::f16),
             engine::kv_bytes_per_token(file, tf::kv_dtype::f32));
  return 0;
}
