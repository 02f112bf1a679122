// The built `serve` binary on the real default model, as evaluation clients use it: prompt
// scoring (echo + logprobs, max_tokens 0, prompt_logprobs) equal bit for bit to the same tokens
// generated, alone and beside 8 other requests; OpenAI's four prompt forms through the openai
// client; a bad token id refused while serving goes on (tests/serve/eval_client_check.py); and
// lm-evaluation-harness run twice on a tiny local task, with equal scores.
#include <catch2/catch.hpp>
#include <tests/serve/live_server.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

using namespace tf::test::live;

namespace {

// Serves the default model with `args` and runs a check script against it to its "ok".
void check_with_script(std::vector<std::string> const& args, std::string const& script) {
  live_server s(args);
  REQUIRE(s.wait_ready(std::chrono::seconds(180)));
  int rc = 0;
  auto const out =
      run_capture("python3 " TF_SOURCE_DIR "/tests/serve/" + script + " " + s.base() + " 2>&1", rc);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("\nok") != std::string::npos);
  CHECK(s.stop() == 0);
  check_census(s.log());
}

}  // namespace

TEST_CASE("the real model: scored prompts equal generated logprobs; every prompt form") {
  if (!real_model_ready()) return;
  if (!have_python_openai()) return;
  check_with_script({"--parallel", "4", "--context", "1024", "--threads", "2"},
                    "eval_client_check.py");
}

TEST_CASE("the real model: lm-evaluation-harness's local-completions scores twice, equal") {
  if (!real_model_ready()) return;
  if (std::system("python3 -c 'import lm_eval' >/dev/null 2>&1") != 0) {
    tf::test::cannot_run("python3 has no lm_eval package");
    return;
  }
  check_with_script({"--parallel", "2", "--context", "1024", "--threads", "2"}, "lm_eval_check.py");
}
