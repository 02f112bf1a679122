// Opens a GGUF in llama.cpp and makes one context of N cells with f16 K and V, so that llama.cpp
// logs the KV buffers it allocates (its "llama_kv_cache: size = ..." lines, read by
// bench/gemma4_kv.py). Built against the libllama of bench/build_llama_cpp.sh, not part of tf's
// build. Usage: llama_kv_size MODEL.gguf N
#include <llama.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf N\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  auto mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  auto cp = llama_context_default_params();
  cp.n_ctx = static_cast<unsigned>(std::atoi(argv[2]));
  cp.n_batch = cp.n_ubatch = 32;
  cp.n_seq_max = 1;
  cp.type_k = cp.type_v = GGML_TYPE_F16;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
