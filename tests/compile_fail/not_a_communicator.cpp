// Must not compile: a type taken as a communicator without an all-reduce or its memory space.
#include <tf/dist/communicator.hpp>

namespace broken {
struct half_communicator {
  int rank() const { return 0; }
  int size() const { return 1; }
};
}  // namespace broken

static_assert(tf::dist::communicator_check<broken::half_communicator>::ok);

int main() {}
