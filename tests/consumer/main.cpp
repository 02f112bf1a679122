// A downstream project: opens a committed tiny model through <tf/engine.hpp>, generates greedy
// tokens and checks them against the fixture's expected ones; then registers a family of its own
// (Gemma 3's decoder written again from the shared layers) and runs the same check through it.
#include <tf/engine.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <utility>
#include <vector>

namespace my {
namespace gemma = tf::families::gemma;

// Pre-norm attention and GeGLU between Gemma's sandwich norms, from tf::layers.
template <class B>
struct twin_model {
  using hparams = gemma::gemma3_hparams;
  using weights = gemma::gemma3_weights<B>;
  static hparams read_hparams(tf::model::model_file const& f) { return gemma::read_hparams(f); }
  static weights load(tf::model::model_file const& f, B& be) { return gemma::load_weights(f, be); }
  explicit twin_model(weights w) : w_(std::move(w)) {}
  weights const& bound() const { return w_; }

  void forward(B& be, typename B::kv_store& kv, typename B::step const& s, float* logits) {
    auto const& hp = w_.hp;
    tf::layers::attention_config c{
        {hp.num_heads, hp.num_kv_heads, hp.head_dim, 1.0f / std::sqrt(hp.query_pre_attn_scalar)},
        {},
        hp.rms_norm_eps};
    be.embed(s, w_.embd, b_.x, std::sqrt(static_cast<float>(hp.hidden_size)));
    for (int l = 0; l < hp.num_layers; ++l) {
      auto const& L = w_.layers[static_cast<std::size_t>(l)];
      c.attn.window = hp.is_sliding(l) ? hp.sliding_window : 0;
      c.rope.theta = hp.is_sliding(l) ? hp.rope_theta_local : hp.rope_theta_global;
      be.rmsnorm(b_.x, L.attn_norm, b_.xn, hp.rms_norm_eps);
      tf::layers::attention(be, s, kv, l, L.attn, c, b_.xn, b_.o, b_.att);
      be.residual(b_.x, b_.o, &L.post_attn_norm, &L.ffn_norm, hp.rms_norm_eps);
      tf::layers::gated_mlp(be, s, L.mlp, tf::backend::activation::gelu_tanh, b_.o, b_.xn, b_.mlp);
      be.residual(b_.x, b_.xn, &L.post_ffw_norm, nullptr, hp.rms_norm_eps);
    }
    be.logits(s, b_.x, w_.output_norm, w_.output, hp.rms_norm_eps, 0.0f, logits);
  }

 private:
  weights w_;
  tf::layers::decoder_buffers<B> b_;
};

struct twin {
  static constexpr std::string_view name = "gemma3_twin";
  static constexpr std::array<std::string_view, 1> arch_names{"gemma3"};
  using kv_pool = tf::kvPool<tf::kv::paged_pool>;
  static constexpr bool per_request_admission = true;
  using hparams = gemma::gemma3_hparams;
  template <class B>
  using model = twin_model<B>;
};
}  // namespace my

// Greedy tokens of the fixture's first prompt through `Registry`, checked against expected.json.
template <class Registry>
bool greedy_matches(std::string const& dir) {
  auto const expected = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
  auto const& p = expected.at("prompts").at(0);
  auto const prompt = p.at("prompt").get<std::vector<std::int32_t>>();
  auto const want = p.at("greedy").get<std::vector<std::int32_t>>();
  tf::open_options o;
  o.kv = tf::kv_dtype::f32;  // the fixture's reference ran in f32
  auto model = tf::open<Registry>(dir + "/tiny-f32.gguf", o);
  auto const got = model->generate(prompt, {}, static_cast<int>(want.size())).tokens;
  std::printf("%s: %zu tokens, %s\n", std::string(model->family()).c_str(), got.size(),
              got == want ? "as expected" : "DIFFERENT");
  return got == want;
}

int main(int argc, char** argv) {
  if (argc < 2) return std::puts("usage: consumer FIXTURES_DIR/gemma/tiny"), 2;
  bool const builtin = greedy_matches<tf::families::builtin>(argv[1]);
  bool const own = greedy_matches<tf::families::registry<my::twin>>(argv[1]);
  std::printf("consumer: builtin=%d own=%d\n", builtin, own);
  return builtin && own ? 0 : 1;
}
