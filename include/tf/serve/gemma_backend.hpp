#pragma once
/// Gemma 3 behind the lane host: the batched CPU forward as a batched_model, and its text codec
/// (GGUF tokenizer, the Gemma chat turn format, end-of-turn stops).
#include <families/gemma/gemma3.hpp>
#include <families/gemma/gemma3_forward.hpp>
#include <tf/serve/lane_host.hpp>
#include <tf/tokenizer/tokenizer.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace tf::serve {

/// gemma3_forward with `pages` KV pages of `page_tokens`, as a batched_model.
class gemma_model {
 public:
  gemma_model(families::gemma::gemma3_weights w, std::size_t pages, std::size_t page_tokens,
              int threads)
      : fwd_(std::move(w),
             {static_cast<std::int32_t>(pages), static_cast<std::int32_t>(page_tokens)}, threads),
        pages_(pages),
        page_tokens_(page_tokens) {}
  std::size_t vocab_size() const { return static_cast<std::size_t>(fwd_.vocab_size()); }
  std::size_t page_tokens() const { return page_tokens_; }
  std::size_t num_pages() const { return pages_; }
  void forward(std::span<batch_row const> rows, float* logits) {
    rows_.clear();
    for (auto const& r : rows) rows_.push_back({r.tokens, r.start_pos, r.page_table, r.all_logits});
    fwd_.forward(rows_, logits);
  }

 private:
  families::gemma::gemma3_forward fwd_;
  std::size_t pages_, page_tokens_;
  std::vector<families::gemma::batch_row> rows_;
};

/// Text for Gemma 3: its tokenizer and chat turns.
class gemma_codec {
 public:
  gemma_codec(tokenizer::tokenizer tok, std::string id)
      : tok_(std::move(tok)), id_(std::move(id)) {}
  std::vector<std::int32_t> encode(std::string const& text) const {
    return tok_.encode(text, true, true);
  }
  std::string piece(std::int32_t t) const { return tok_.token_to_piece(t); }
  /// Gemma turns: system text joins the first user turn; assistant turns are "model".
  std::string render_chat(nlohmann::json const& messages) const {
    std::string out, system;
    for (auto const& m : messages) {
      auto role = m.at("role").get<std::string>();
      auto content = m.at("content").get<std::string>();
      if (role == "system" || role == "developer") {
        system += (system.empty() ? "" : "\n\n") + content;
        continue;
      }
      if (!system.empty() && role == "user") {
        content = system + "\n\n" + content;
        system.clear();
      }
      out += "<start_of_turn>" + std::string(role == "assistant" ? "model" : "user") + "\n" +
             content + "<end_of_turn>\n";
    }
    if (!system.empty()) out += "<start_of_turn>user\n" + system + "<end_of_turn>\n";
    return out + "<start_of_turn>model\n";
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
};

}  // namespace tf::serve
