// Must not compile: an engine over a family whose forward needs a capability the backend lacks.
#include <tf/engine.hpp>

namespace broken {
// Gemma 3 asking for sampling on the device, which the CPU backend does not offer.
struct wants_device_sampling : tf::families::gemma::gemma3 {
  using backend_needs = tf::backend::needs<tf::backend::sampling_on_device>;
};
}  // namespace broken

int main() {
  return sizeof(tf::engine<broken::wants_device_sampling, tf::backend::cpu>) > 0 ? 0 : 1;
}
