#include <tf/tokenizer/chat_template.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("real chat templates render exactly as jinja2 (HF apply_chat_template) does") {
  auto g = nlohmann::ordered_json::parse(
      read_file(std::string(TF_FIXTURES_DIR) + "/jinja/goldens.json"));
  std::map<std::string, std::string> templates;
  std::map<std::string, int> passed;
  tf::jinja::render_options ro;
  ro.now = 1768469400;  // the golden script's fixed strftime_now date
  REQUIRE(g["chat"].size() > 100);
  for (const auto& c : g["chat"]) {
    std::string file = c["template_file"];
    if (!templates.count(file))
      templates[file] = read_file(std::string(TF_FIXTURES_DIR) + "/jinja/" + file);
    INFO("case " << c["name"].get<std::string>());
    if (c.contains("expected")) {
      std::string got;
      try {
        got = tf::tokenizer::render_chat(templates[file], c["messages"], c["options"], ro);
      } catch (const tf::error& e) {
        FAIL_CHECK("threw: " << e.what());
        continue;
      }
      CHECK(got == c["expected"].get<std::string>());
      if (got == c["expected"].get<std::string>()) ++passed[file];
    } else {
      INFO("jinja2 error: " << c["error"].get<std::string>());
      CHECK_THROWS_AS(tf::tokenizer::render_chat(templates[file], c["messages"], c["options"], ro),
                      tf::error);
    }
  }
  CHECK(templates.size() == 6);
  for (const auto& [file, n] : passed) CHECK(n > 0);
}

TEST_CASE("render_chat rejects bad arguments and raising templates") {
  auto obj = nlohmann::json::object();
  CHECK_THROWS_AS(tf::tokenizer::render_chat("x", obj, obj), tf::error);
  auto bad =
      nlohmann::json::parse(R"([{"role":"user","content":"a"},{"role":"user","content":"b"}])");
  CHECK_THROWS_WITH(
      tf::tokenizer::render_chat(
          "{% if messages[0].role == messages[1].role %}{{ raise_exception('roles must alternate') "
          "}}{% endif %}",
          bad, obj),
      Catch::Contains("must alternate"));
}
