#pragma once
// A served model whose replies are scripted: each submit answers with the first script whose
// `when` text appears in the prompt's bytes (the toy codec's ids are bytes), one token a byte, so
// the reply parsers and the openai client can be tested on known model output.
#include <tf/error.hpp>
#include <tf/serve/served_model.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "toy_model.hpp"

namespace tf::serve::test {

struct script_line {
  std::string when, reply;  // `when` empty: any prompt
};

inline std::string read_file_text(std::string const& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tf::error("tf: cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Scripts from JSON [{"when": text, "reply": text}, ...].
inline std::vector<script_line> scripts_from_json(nlohmann::json const& j) {
  std::vector<script_line> out;
  for (auto const& e : j) out.push_back({e.value("when", std::string()), e.at("reply")});
  return out;
}

class scripted_model final : public served_model {
 public:
  scripted_model(std::shared_ptr<served_model> inner, std::vector<script_line> scripts)
      : inner_(std::move(inner)), scripts_(std::move(scripts)) {}

  std::vector<std::int32_t> encode_text(std::string const& text) const override {
    return inner_->encode_text(text);
  }
  std::vector<std::int32_t> encode_chat(nlohmann::json const& m,
                                        nlohmann::json const& kw) const override {
    return inner_->encode_chat(m, kw);
  }
  std::vector<std::int32_t> encode_chat_ordered(nlohmann::ordered_json const& m,
                                                nlohmann::ordered_json const& kw) const override {
    return inner_->encode_chat_ordered(m, kw);
  }
  std::string chat_template() const override { return inner_->chat_template(); }
  std::string piece(std::int32_t token) const override { return inner_->piece(token); }
  std::size_t vocab_size() const override { return inner_->vocab_size(); }
  std::vector<std::int32_t> stop_tokens() const override { return inner_->stop_tokens(); }
  std::string model_id() const override { return inner_->model_id(); }
  stream_submit submit(generation_request req) override {
    std::string prompt;
    for (auto t : req.prompt) prompt += inner_->piece(t);
    {
      std::lock_guard lock(mutex_);
      prompts_.push_back(prompt);
    }
    std::string reply;
    for (auto const& s : scripts_)
      if (s.when.empty() || prompt.find(s.when) != std::string::npos) {
        reply = s.reply;
        break;
      }
    stream_submit out;
    out.status = submit_status::admitted;
    out.stream = std::make_shared<request_stream>();
    out.stream->prompt_tokens_ = req.prompt.size();
    std::size_t n = 0;
    for (unsigned char ch : reply) {
      if (req.max_tokens >= 0 && n == static_cast<std::size_t>(req.max_tokens)) break;
      sample::sample_result r;
      r.token = ch;
      out.stream->push(r);
      ++n;
    }
    out.stream->finish(n < reply.size() ? finish_reason::length : finish_reason::stop);
    return out;
  }
  load_snapshot load() const override { return inner_->load(); }
  census count() const override { return inner_->count(); }
  metrics& stats() override { return inner_->stats(); }
  host_config const& config() const override { return inner_->config(); }
  census shutdown(std::chrono::milliseconds grace) override { return inner_->shutdown(grace); }

  /// The prompts submitted so far, as text.
  std::vector<std::string> prompts() const {
    std::lock_guard lock(mutex_);
    return prompts_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> prompts_;
  std::shared_ptr<served_model> inner_;
  std::vector<script_line> scripts_;
};

}  // namespace tf::serve::test
