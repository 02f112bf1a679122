#pragma once
/// A family's CPU forward behind the lane host: any cpu_entry's forward as a batched_model, and
/// the text codec every GGUF family shares (its tokenizer, chat template, end-of-generation stops).
#include <families/common/cpu_entry.hpp>
#include <tf/error.hpp>
#include <tf/serve/lane_host.hpp>
#include <tf/tokenizer/chat_template.hpp>
#include <tf/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tf::serve {

/// Entry's CPU forward over `pages` KV pages of `page_tokens`, as a batched_model.
template <families::cpu_entry Entry>
class forward_model {
 public:
  forward_model(model::model_file const& file, std::size_t pages, std::size_t page_tokens,
                int threads, families::kv_dtype dtype = families::kv_dtype::f32)
      : fwd_(Entry::make(
            file, {static_cast<std::int32_t>(pages), static_cast<std::int32_t>(page_tokens), dtype},
            threads)),
        pages_(pages),
        page_tokens_(page_tokens) {}
  std::size_t vocab_size() const { return static_cast<std::size_t>(fwd_->vocab_size()); }
  std::size_t page_tokens() const { return page_tokens_; }
  std::size_t num_pages() const { return pages_; }
  void forward(std::span<batch_row const> rows, float* logits) {
    rows_.clear();
    for (auto const& r : rows) rows_.push_back({r.tokens, r.start_pos, r.page_table, r.all_logits});
    fwd_->forward(rows_, logits);
  }

 private:
  std::unique_ptr<typename Entry::forward_type> fwd_;
  std::size_t pages_, page_tokens_;
  std::vector<families::batch_row> rows_;
};

/// Text for a GGUF model: its tokenizer and the file's chat template. A file without one gets the
/// built-in Gemma 3 template only when `gemma_fallback` (other families' turns differ); otherwise
/// chat requests are refused and plain completions still work.
class text_codec {
 public:
  text_codec(tokenizer::tokenizer tok, std::string id, std::string chat_template = {},
             bool gemma_fallback = true)
      : tok_(std::move(tok)),
        id_(std::move(id)),
        template_(gemma_fallback ? std::string(tokenizer::chat_template_or_fallback(chat_template))
                                 : chat_template) {
    auto const& v = tok_.vocab();
    if (v.bos >= 0 && static_cast<std::size_t>(v.bos) < v.size()) bos_text_ = v.tokens[v.bos];
    if (v.eos >= 0 && static_cast<std::size_t>(v.eos) < v.size()) eos_text_ = v.tokens[v.eos];
  }
  std::vector<std::int32_t> encode(std::string const& text) const {
    return tok_.encode(text, true, true);
  }
  std::string piece(std::int32_t t) const { return tok_.token_to_piece(t); }
  /// The chat template's text for `messages`, with the generation prompt; `kwargs` (an object)
  /// adds template variables and may override add_generation_prompt, bos_token and eos_token.
  std::string render_chat(nlohmann::json const& messages,
                          nlohmann::json const& kwargs = nlohmann::json::object()) const {
    if (template_.empty())
      throw error("tf: {} has no tokenizer.chat_template: use /v1/completions with a prompt", id_);
    if (!kwargs.is_object())
      throw error("tf: chat template kwargs must be a JSON object, got {}", kwargs.type_name());
    nlohmann::json opts = {
        {"add_generation_prompt", true}, {"bos_token", bos_text_}, {"eos_token", eos_text_}};
    for (auto const& [key, value] : kwargs.items()) opts[key] = value;
    return tokenizer::render_chat(template_, messages, opts);
  }
  /// The rendered chat as ids: control texts parsed, BOS added only if the template left it out.
  std::vector<std::int32_t> encode_chat(
      nlohmann::json const& messages,
      nlohmann::json const& kwargs = nlohmann::json::object()) const {
    auto const text = render_chat(messages, kwargs);
    bool const has_bos = !bos_text_.empty() && text.starts_with(bos_text_);
    return tok_.encode(text, !has_bos, true);
  }
  std::vector<std::int32_t> stop_tokens() const {
    std::vector<std::int32_t> s;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(tok_.n_tokens()); ++i)
      if (tok_.is_eog(i)) s.push_back(i);
    return s;
  }
  std::string model_id() const { return id_; }

 private:
  tokenizer::tokenizer tok_;
  std::string id_;
  std::string template_, bos_text_, eos_text_;
};

}  // namespace tf::serve
