// bytes_read() counts what a read-into-memory load copies, to the byte; a mapped file adds nothing
// (it is read on first use).
#include <tf/model/detail/mapped_bytes.hpp>
#include <tf/model/read_progress.hpp>

#include <catch2/catch.hpp>

#include <filesystem>

TEST_CASE("reading a model file into memory advances bytes_read by its size; mapping does not") {
  auto const path = std::filesystem::path(TF_FIXTURES_DIR) / "model" / "tiny.gguf";
  auto const size = std::filesystem::file_size(path);
  REQUIRE(size > 0);
  auto const before = tf::model::bytes_read().load();
  auto const mapped = tf::model::detail::mapped_bytes::load(path, tf::model::load_mode::map);
  CHECK(mapped.size() == size);
  CHECK(tf::model::bytes_read().load() == before);
  auto const read = tf::model::detail::mapped_bytes::load(path, tf::model::load_mode::read);
  CHECK(read.size() == size);
  CHECK(tf::model::bytes_read().load() - before == size);
}
