#pragma once
/// The HTTP layer's view of a loaded model (a served model, not a compute backend): text <->
/// tokens plus a lane host, behind one interface so the server can answer /health before the
/// model has loaded.
#include <tf/serve/lane_host.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tf::serve {

/// What the HTTP routes call; one implementation per (model, codec) pair.
class served_model {
 public:
  virtual ~served_model() = default;
  /// Prompt text -> ids (BOS as the vocab asks).
  virtual std::vector<std::int32_t> encode_text(std::string const& text) const = 0;
  /// Chat messages [{role, content: string}] -> ids, with the generation prompt; the entries of
  /// `template_kwargs` (a JSON object) are extra chat-template variables, e.g. enable_thinking.
  virtual std::vector<std::int32_t> encode_chat(nlohmann::json const& messages,
                                                nlohmann::json const& template_kwargs) const = 0;
  /// encode_chat keeping the documents' key order (a tool's JSON schema renders as the client
  /// wrote it); `options` carries the template kwargs and `tools`.
  virtual std::vector<std::int32_t> encode_chat_ordered(
      nlohmann::ordered_json const& messages, nlohmann::ordered_json const& options) const {
    return encode_chat(nlohmann::json(messages), nlohmann::json(options));
  }
  /// The chat template's source ("" when unknown): which tool-call and reasoning formats apply.
  virtual std::string chat_template() const { return {}; }
  /// The bytes of one generated token.
  virtual std::string piece(std::int32_t token) const = 0;
  /// A token's text with control tokens spelled out ("<eos>"), as a tokenizer names them.
  virtual std::string token_text(std::int32_t token) const { return piece(token); }
  /// Token ids run 0..vocab_size()-1; 0 when unknown (ids are then not checked up front).
  virtual std::size_t vocab_size() const { return 0; }
  virtual std::vector<std::int32_t> stop_tokens() const = 0;
  virtual std::string model_id() const = 0;
  virtual stream_submit submit(generation_request req) = 0;
  virtual load_snapshot load() const = 0;
  virtual census count() const = 0;
  virtual metrics& stats() = 0;
  virtual host_config const& config() const = 0;
  /// Whether the lane host drafts tokens for speculative decoding.
  virtual bool drafting() const { return false; }
  /// Stops the lane host (see lane_host::shutdown) and returns the stop census.
  virtual census shutdown(std::chrono::milliseconds grace) = 0;
};

/// A lane host over `Model`, with `Codec` for text (encode, piece, render_chat(messages, kwargs),
/// stop_tokens, model_id); owns both.
template <batched_model Model, class Family, class Codec>
class lane_served_model final : public served_model {
 public:
  lane_served_model(std::unique_ptr<Model> model, Codec codec, host_config cfg,
                    draft_config drafts = {})
      : model_(std::move(model)),
        codec_(std::move(codec)),
        host_(*model_, cfg, nullptr, std::move(drafts)) {}

  std::vector<std::int32_t> encode_text(std::string const& text) const override {
    return codec_.encode(text);
  }
  std::vector<std::int32_t> encode_chat(nlohmann::json const& messages,
                                        nlohmann::json const& template_kwargs) const override {
    // A codec that knows how its template marks BOS encodes the chat itself.
    if constexpr (requires { codec_.encode_chat(messages, template_kwargs); })
      return codec_.encode_chat(messages, template_kwargs);
    else
      return codec_.encode(codec_.render_chat(messages, template_kwargs));
  }
  std::vector<std::int32_t> encode_chat_ordered(
      nlohmann::ordered_json const& messages,
      nlohmann::ordered_json const& options) const override {
    if constexpr (requires { codec_.encode_chat(messages, options); })
      return codec_.encode_chat(messages, options);
    else
      return served_model::encode_chat_ordered(messages, options);
  }
  std::string chat_template() const override {
    if constexpr (requires { codec_.chat_template(); })
      return std::string(codec_.chat_template());
    else
      return {};
  }
  std::string piece(std::int32_t token) const override { return codec_.piece(token); }
  std::string token_text(std::int32_t token) const override {
    if constexpr (requires { codec_.tokens().token_to_piece(token, true); })
      return codec_.tokens().token_to_piece(token, true);
    else
      return codec_.piece(token);
  }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(model_->vocab_size()); }
  std::vector<std::int32_t> stop_tokens() const override { return codec_.stop_tokens(); }
  std::string model_id() const override { return codec_.model_id(); }
  stream_submit submit(generation_request req) override { return host_.submit(std::move(req)); }
  load_snapshot load() const override { return host_.load(); }
  census count() const override { return host_.count(); }
  metrics& stats() override { return host_.stats(); }
  host_config const& config() const override { return host_.config(); }
  bool drafting() const override { return host_.drafting(); }
  census shutdown(std::chrono::milliseconds grace) override { return host_.shutdown(grace); }

 private:
  std::unique_ptr<Model> model_;
  Codec codec_;
  lane_host<Model, Family> host_;
};

}  // namespace tf::serve
