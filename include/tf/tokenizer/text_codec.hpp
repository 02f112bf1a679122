#pragma once
/// Text for a model: its tokenizer and chat template, read from a GGUF or a Hugging Face folder's
/// tokenizer.json and tokenizer_config.json.
#include <tf/error.hpp>
#include <tf/model/model_file.hpp>
#include <tf/tokenizer/chat_template.hpp>
#include <tf/tokenizer/from_gguf.hpp>
#include <tf/tokenizer/from_hf.hpp>
#include <tf/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::tokenizer {

/// A tokenizer, its model id and chat template. A model without a template gets
/// `builtin_template` (its family's, tf::builtin_chat_template); when that is empty too, chat is
/// refused and plain prompts still work.
class text_codec {
 public:
  text_codec(tokenizer tok, std::string id, std::string chat_template = {},
             std::string_view builtin_template = {})
      : tok_(std::move(tok)),
        id_(std::move(id)),
        template_(chat_template.empty() ? std::string(builtin_template)
                                        : std::move(chat_template)) {
    auto const& v = tok_.vocab();
    if (v.bos >= 0 && static_cast<std::size_t>(v.bos) < v.size()) bos_text_ = v.tokens[v.bos];
    if (v.eos >= 0 && static_cast<std::size_t>(v.eos) < v.size()) eos_text_ = v.tokens[v.eos];
  }

  tokenizer const& tokens() const { return tok_; }
  std::string const& chat_template() const { return template_; }

  /// Prompt text -> ids, BOS as the vocabulary asks.
  std::vector<std::int32_t> encode(std::string const& text) const {
    return tok_.encode(text, true, true);
  }
  std::string piece(std::int32_t t) const { return tok_.token_to_piece(t); }
  std::string decode(std::span<std::int32_t const> ids) const { return tok_.decode(ids); }

  /// The chat template's text for `messages`, with the generation prompt; `kwargs` (an object)
  /// adds template variables (tools, enable_thinking, ...) and may override
  /// add_generation_prompt, bos_token and eos_token. With nlohmann::ordered_json messages the
  /// documents keep their key order (a tool's schema renders as the client wrote it, as in HF).
  template <class Messages = nlohmann::json, class Kwargs = nlohmann::json>
  std::string render_chat(Messages const& messages, Kwargs const& kwargs = Kwargs::object()) const {
    if (template_.empty())
      throw error("tf: {} has no tokenizer.chat_template: use a plain prompt", id_);
    if (!kwargs.is_object())
      throw error("tf: chat template kwargs must be a JSON object, got {}", kwargs.type_name());
    Messages opts = {
        {"add_generation_prompt", true}, {"bos_token", bos_text_}, {"eos_token", eos_text_}};
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) opts[it.key()] = Messages(*it);
    return tf::tokenizer::render_chat<Messages>(template_, messages, opts);
  }
  /// The rendered chat as ids: control texts parsed, BOS added only if the template left it out.
  template <class Messages = nlohmann::json, class Kwargs = nlohmann::json>
  std::vector<std::int32_t> encode_chat(Messages const& messages,
                                        Kwargs const& kwargs = Kwargs::object()) const {
    auto const text = render_chat(messages, kwargs);
    bool const has_bos = !bos_text_.empty() && text.starts_with(bos_text_);
    return tok_.encode(text, !has_bos, true);
  }
  /// Every end-of-generation id.
  std::vector<std::int32_t> stop_tokens() const {
    std::vector<std::int32_t> s;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(tok_.n_tokens()); ++i)
      if (tok_.is_eog(i)) s.push_back(i);
    return s;
  }
  std::string model_id() const { return id_; }

 private:
  tokenizer tok_;
  std::string id_;
  std::string template_, bos_text_, eos_text_;
};

/// Whether `file` carries a tokenizer (a GGUF's tokenizer.ggml.model, or the folder's
/// tokenizer.json).
inline bool has_tokenizer(model::model_file const& file, std::filesystem::path const& path) {
  if (auto const* g = file.gguf()) return g->get_string("tokenizer.ggml.model").has_value();
  return std::filesystem::exists(path / "tokenizer.json");
}

/// The codec of the model at `path` (opened as `file`); `id` names it in replies, and
/// `builtin_template` is the chat template when the file carries none.
inline text_codec load_codec(model::model_file const& file, std::filesystem::path const& path,
                             std::string id, std::string_view builtin_template) {
  if (auto const* g = file.gguf()) {
    if (!g->get_string("tokenizer.ggml.model"))
      throw error("tf: {} has no tokenizer (no tokenizer.ggml.model)", path.string());
    return {load_tokenizer(*g), std::move(id),
            std::string(g->get_string("tokenizer.chat_template").value_or(std::string_view{})),
            builtin_template};
  }
  auto const json = path / "tokenizer.json";
  if (!std::filesystem::exists(json))
    throw error("tf: {} has no tokenizer.json: give a GGUF or a folder with one", path.string());
  std::string chat_template;
  auto const config = path / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    auto const j = read_json_file(config);
    if (auto it = j.find("chat_template"); it != j.end() && it->is_string())
      chat_template = it->get<std::string>();
  }
  return {load_hf_tokenizer(json), std::move(id), chat_template, builtin_template};
}

}  // namespace tf::tokenizer
