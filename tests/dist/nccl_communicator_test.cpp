// tf::dist::nccl_communicator on the GPU (a GPU test: it skips where no CUDA device is visible).
// Under `mpirun -n 1` here (TP=1); `mpirun -n 2` of the same binary on a two-GPU machine runs
// TP=2, one device per rank.
#define CATCH_CONFIG_RUNNER
#include <tf/dist/nccl_communicator.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int visible_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

bool have_device(tf::dist::mpi_communicator& host) {
  int const devices = visible_devices();
  if (devices >= host.size()) return true;
  std::printf("SKIP (GPU test): %d CUDA device(s) visible for %d rank(s)\n", devices, host.size());
  return false;
}

// Rank r's element i, with magnitudes that make the sum order show in the bits.
float value(int rank, std::size_t i) {
  float const base = static_cast<float>((i * 2654435761u + 977u * rank) % 10007) / 10007.0f - 0.5f;
  return base * (rank % 2 ? 1e7f : 1.0f);
}

struct device_floats {
  explicit device_floats(std::size_t n) : n(n) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess);
  }
  ~device_floats() { cudaFree(p); }
  void put(std::vector<float> const& h) {
    REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<float> get() const {
    std::vector<float> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  std::span<float> span() { return {p, n}; }
  std::size_t n;
  float* p = nullptr;
};

}  // namespace

TEST_CASE("dist/nccl: all_reduce_sum is the rank-order sum, bit for bit", "[dist][cuda]") {
  tf::dist::mpi_communicator host;
  if (!have_device(host)) return;
  tf::dist::nccl_communicator c(host, host.rank() % visible_devices());
  CHECK(c.rank() == host.rank());
  CHECK(c.size() == host.size());
  for (std::size_t n : {std::size_t{1}, std::size_t{640}, std::size_t{5120 * 8}}) {
    std::vector<float> mine(n), expected(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = value(c.rank(), i);
    for (std::size_t i = 0; i < n; ++i) {
      float s = value(0, i);
      for (int r = 1; r < c.size(); ++r) s = s + value(r, i);
      expected[i] = s;
    }
    device_floats x(n);
    x.put(mine);
    c.all_reduce_sum(x.span());
    std::vector<float> const got = x.get();
    INFO("n = " << n);
    CHECK(std::memcmp(got.data(), expected.data(), n * sizeof(float)) == 0);
  }
}

TEST_CASE("dist/nccl: all_gather of device floats, and the host collectives", "[dist][cuda]") {
  tf::dist::mpi_communicator host;
  if (!have_device(host)) return;
  tf::dist::nccl_communicator c(host, host.rank() % visible_devices());
  std::size_t const n = 100;
  std::vector<float> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = value(c.rank(), i);
  device_floats in(n), out(n * c.size());
  in.put(mine);
  c.all_gather(std::span<float const>(in.p, n), out.span());
  std::vector<float> const all = out.get();
  for (int r = 0; r < c.size(); ++r)
    for (std::size_t i = 0; i < n; ++i) CHECK(all[r * n + i] == value(r, i));
  CHECK(c.all_reduce_min(10 + c.rank()) == 10);
  std::vector<std::byte> plan(c.rank() == 0 ? 9 : 0, std::byte{5});
  c.broadcast(plan, 0);
  CHECK(plan.size() == 9);
  c.barrier();
}

int main(int argc, char** argv) {
  tf::dist::mpi_runtime mpi(&argc, &argv);
  return Catch::Session().run(argc, argv);
}
