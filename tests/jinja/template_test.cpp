#include <tf/jinja/template.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

namespace {

nlohmann::ordered_json load_goldens() {
  std::ifstream in(std::string(TF_FIXTURES_DIR) + "/jinja/goldens.json");
  REQUIRE(in.good());
  return nlohmann::ordered_json::parse(in);
}

// 2026-01-15 09:30:00 UTC, the date the golden script fixes strftime_now to.
constexpr std::time_t fixed_now = 1768469400;

}  // namespace

TEST_CASE("jinja feature templates render exactly as jinja2 does") {
  auto g = load_goldens();
  REQUIRE(g["unit"].size() > 50);
  tf::jinja::render_options opt;
  opt.now = fixed_now;
  for (const auto& c : g["unit"]) {
    std::string name = c["name"];
    INFO("case " << name << "\ntemplate: " << c["template"].get<std::string>());
    if (c.contains("expected")) {
      std::string got;
      try {
        got =
            tf::jinja::template_t(c["template"].get<std::string>()).render_json(c["context"], opt);
      } catch (const tf::error& e) {
        FAIL_CHECK("threw: " << e.what());
        continue;
      }
      CHECK(got == c["expected"].get<std::string>());
    } else {
      INFO("jinja2 error: " << c["error"].get<std::string>());
      CHECK_THROWS_AS(
          tf::jinja::template_t(c["template"].get<std::string>()).render_json(c["context"], opt),
          tf::error);
    }
  }
}

TEST_CASE("jinja syntax errors throw tf::error with line and column") {
  auto g = load_goldens();
  for (const auto& c : g["syntax_errors"]) {
    std::string src = c["template"];
    INFO("template: " << src);
    try {
      tf::jinja::template_t t(src);
      FAIL("parsed without error");
    } catch (const tf::error& e) {
      CHECK(std::string(e.what()).find("line") != std::string::npos);
    }
  }
}

TEST_CASE("jinja error messages carry the position") {
  try {
    tf::jinja::template_t t("line one\n{{ raise_exception('boom') }}");
    (void)t.render(tf::jinja::value(tf::jinja::dict_t{}));
    FAIL("no throw");
  } catch (const tf::error& e) {
    std::string w = e.what();
    CHECK(w.find("boom") != std::string::npos);
    CHECK(w.find("line 2") != std::string::npos);
  }
}

TEST_CASE("truncated real templates throw instead of crashing") {
  for (auto name : {"gemma3", "gemma4", "qwen3", "qwen3_5", "glm4_5", "nemotron_h"}) {
    std::ifstream in(std::string(TF_FIXTURES_DIR) + "/jinja/" + name + ".jinja");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string src = ss.str();
    REQUIRE(src.size() > 100);
    tf::jinja::template_t full(src);  // the whole template parses
    int threw = 0, cuts = 0;
    for (size_t cut = 1; cut < src.size(); cut += 37) {
      ++cuts;
      try {
        tf::jinja::template_t t(src.substr(0, cut));
        auto ctx = nlohmann::ordered_json::parse(
            R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true})");
        (void)t.render_json(ctx);
      } catch (const tf::error&) {
        ++threw;
      }
    }
    INFO(name << ": " << threw << " of " << cuts << " truncations threw");
    CHECK(threw > cuts / 2);
  }
}
