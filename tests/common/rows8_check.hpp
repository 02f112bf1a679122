#pragma once
// A GGUF read into memory gets its Q8_0 embedding and head in the rows8 layout and gives the
// mapped file's logits bit for bit: each prompt whole, then token by token, at 1 and 2 threads.
// `Engine` is a tf::engine on the CPU backend; `load(file)` binds a model_file's weights for it.
#include <tests/common/hf_oracle.hpp>
#include <tf/backend/cpu.hpp>
#include <tf/model/model_file.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tf::test {

template <class Engine, class Load>
void check_rows8_head(std::string const& gguf, Load load,
                      std::vector<std::vector<std::int32_t>> const& prompts) {
  using kernels::cpu::weight_layout;
  auto mapped = model::model_file::open(gguf, model::load_mode::map);
  auto read = model::model_file::open(gguf, model::load_mode::read);
  auto const wm = load(mapped);
  auto const wr = load(read);
  // Only the AVX-512 VNNI path has a rows8 kernel; elsewhere the file keeps its row order.
  auto const want = kernels::cpu::default_isa() == kernels::cpu::isa::avx512 ? weight_layout::rows8
                                                                             : weight_layout::rows;
  CHECK(wm.embd.layout == weight_layout::rows);
  REQUIRE(wr.embd.layout == want);
  CHECK(wr.output.layout == want);
  for (int threads : {1, 2}) {
    Engine fm(wm, {16, 4}, {threads}), fr(wr, {16, 4}, {threads});
    for (auto const& p : prompts) {
      stream<Engine> sm(fm), sr(fr);
      INFO("threads " << threads);
      CHECK(sr.feed(p, true) == sm.feed(p, true));
      stream<Engine> tm(fm), tr(fr);
      for (std::int32_t tok : p) CHECK(tr.feed({&tok, 1}, false) == tm.feed({&tok, 1}, false));
    }
  }
}

}  // namespace tf::test
