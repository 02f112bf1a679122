#pragma once
/// One chat or text completion request in flight: its n choices (each its own stream), the text
/// and logprobs they have produced, and the OpenAI JSON of the reply and its stream chunks.
#include <tf/serve/openai_request.hpp>
#include <tf/serve/served_model.hpp>
#include <tf/serve/sha256.hpp>
#include <tf/serve/text_assembler.hpp>
#include <tf/serve/tool_calls_stream.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tf::serve {

namespace detail {

/// JSON text with invalid UTF-8 replaced, so any token bytes can be carried.
inline std::string dump_json(nlohmann::json const& v) {
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The string with invalid UTF-8 replaced by U+FFFD.
inline std::string valid_utf8(std::string const& s) {
  return nlohmann::json::parse(dump_json(nlohmann::json(s))).get<std::string>();
}

inline char const* reason_text(finish_reason r) {
  return r == finish_reason::stop ? "stop" : r == finish_reason::length ? "length" : "cancelled";
}

/// A fresh tool call id: "call_" and 24 random letters and digits.
inline std::string tool_call_id() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  static constexpr char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int k = 0; k < 24; ++k) id += abc[gen() % (sizeof(abc) - 1)];
  return id;
}

}  // namespace detail

/// One sampled choice: its stream and what it has produced so far.
struct choice_state {
  std::shared_ptr<request_stream> stream;
  text_assembler text{{}};
  reply_parser parser;  // chat: reasoning and tool calls out of the text
  std::string reasoning, content;
  nlohmann::json tool_calls = nlohmann::json::array();  // OpenAI tool_call objects so far
  std::vector<std::int32_t> tokens;
  nlohmann::json logprobs = nlohmann::json::array();
  std::string prompt_text;                           // what echo repeats
  std::vector<std::int32_t> prompt_ids;              // the prompt as the model read it
  std::vector<sample::sample_result> prompt_scores;  // the prompt's tokens from the second, scored
  std::int64_t seed = 0;
  finish_reason reason = finish_reason::length;
  std::string error;
  bool done = false, sent_role = false, sent_echo = false, sent_final = false;
};

/// A request's choices and the reply's fixed fields.
struct completion_job {
  openai_request req;
  std::shared_ptr<served_model> model;
  std::string id, model_id;
  std::int64_t created = 0;
  std::size_t prompt_tokens = 0;  // over every prompt of the request
  std::int64_t seed = 0;  // the request's (or the drawn) seed; choice i samples with seed + i
  std::vector<choice_state> choices;

  /// Feeds choice `c`'s next text through its parser; returns what it produced, each new call
  /// as an OpenAI tool_call object (kept in c.tool_calls too).
  struct chat_piece {
    std::string reasoning, content;
    nlohmann::json calls = nlohmann::json::array();
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  };
  static chat_piece parse(choice_state& c, std::string const& text, bool final) {
    auto p = c.parser.feed(text, final);
    chat_piece out{std::move(p.reasoning), std::move(p.content)};
    for (auto& call : p.calls) {
      nlohmann::json tc{{"id", detail::tool_call_id()},
                        {"type", "function"},
                        {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
      c.tool_calls.push_back(tc);
      out.calls.push_back(std::move(tc));
    }
    c.reasoning += out.reasoning;
    c.content += out.content;
    return out;
  }
  /// The finish reason as sent: "tool_calls" when a chat choice that stopped made calls.
  static char const* finish_text(choice_state const& c) {
    if (c.reason == finish_reason::stop && !c.tool_calls.empty()) return "tool_calls";
    return detail::reason_text(c.reason);
  }

  bool all_done() const {
    for (auto const& c : choices)
      if (!c.done) return false;
    return true;
  }
  void cancel_all() {
    for (auto& c : choices)
      if (c.stream) c.stream->cancel();
  }

  /// Takes what choice `c`'s engine stream produced within `wait`: tokens, stop strings, the end.
  void pull(choice_state& c, std::chrono::milliseconds wait) {
    if (c.done) return;
    auto ch = c.stream->next(wait);
    for (auto& t : ch.prompt) c.prompt_scores.push_back(std::move(t));
    for (auto& t : ch.tokens) {
      if (c.text.stopped()) break;
      c.tokens.push_back(t.token);
      auto piece = model->piece(t.token);
      if (req.logprobs) c.logprobs.push_back(logprob_entry(t, piece));
      if (c.text.add(piece)) {
        c.stream->cancel(finish_reason::stop);
        c.reason = finish_reason::stop;
        c.done = true;
      }
    }
    if (ch.done && !c.done) {
      c.done = true;
      c.reason = ch.reason;
      c.error = ch.error;
    }
  }

  /// A logprob entry's name for a token: its text, or vLLM's "token_id:N" when asked.
  std::string token_name(std::int32_t id, std::string const& piece) const {
    return req.tokens_as_ids ? "token_id:" + std::to_string(id) : detail::valid_utf8(piece);
  }

  /// A piece's bytes as the JSON array logprob entries carry.
  static nlohmann::json piece_bytes(std::string const& piece) {
    auto a = nlohmann::json::array();
    for (unsigned char ch : piece) a.push_back(ch);
    return a;
  }

  nlohmann::json logprob_entry(sample::sample_result const& t, std::string const& piece) const {
    auto top = nlohmann::json::array();
    for (auto const& alt : t.top) {
      auto p = model->piece(alt.token);
      top.push_back({{"token", token_name(alt.token, p)},
                     {"logprob", alt.logprob},
                     {"bytes", piece_bytes(p)}});
    }
    return {{"token", token_name(t.token, piece)},
            {"logprob", t.logprob},
            {"bytes", piece_bytes(piece)},
            {"top_logprobs", top}};
  }

  /// Whether every prompt token after the first has its logprob (or none is coming).
  bool prompt_scored(choice_state const& c) const {
    return req.prompt_logprobs < 0 || c.done || c.prompt_scores.size() + 1 >= c.prompt_ids.size();
  }

  nlohmann::json usage() const {
    std::size_t generated = 0, cached = 0, drafted = 0, accepted = 0;
    for (auto const& c : choices) {
      generated += c.tokens.size();
      if (c.stream) {
        drafted += c.stream->drafted_tokens();
        accepted += c.stream->accepted_tokens();
      }
    }
    // A prompt's choices read the same tokens; its first choice's reuse is the prompt's.
    for (std::size_t i = 0; i < choices.size(); i += static_cast<std::size_t>(req.n))
      if (choices[i].stream) cached += choices[i].stream->cached_tokens();
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", generated},
            {"total_tokens", prompt_tokens + generated},
            {"prompt_tokens_details", {{"cached_tokens", cached}}},
            // OpenAI's names for predicted-output tokens; here the speculative drafts.
            {"completion_tokens_details",
             {{"accepted_prediction_tokens", accepted},
              {"rejected_prediction_tokens", drafted - accepted}}}};
  }

  /// tf's block for one choice: SHA-256 of its token ids, their count, and its seed.
  static nlohmann::json choice_block(choice_state const& c) {
    return {{"token_sha", token_sha(c.tokens)}, {"tokens", c.tokens.size()}, {"seed", c.seed}};
  }
  /// tf's block for the reply: the first choice's token_sha and count, the request's seed (a
  /// request sent with it samples the same text), and with n > 1 every choice's block.
  nlohmann::json tf_block() const {
    auto out = choice_block(choices.front());
    out["seed"] = seed;
    if (choices.size() > 1) {
      auto all = nlohmann::json::array();
      for (std::size_t i = 0; i < choices.size(); ++i) {
        auto b = choice_block(choices[i]);
        b["index"] = i;
        all.push_back(b);
      }
      out["choices"] = all;
    }
    return out;
  }

  /// The prompt's entries in chat form: its first token with a null logprob (nothing precedes
  /// it), then each scored token.
  nlohmann::json prompt_entries(choice_state const& c) const {
    auto out = nlohmann::json::array();
    if (c.prompt_ids.empty()) return out;
    auto const id = c.prompt_ids.front();
    auto const piece = model->piece(id);
    out.push_back({{"token", token_name(id, piece)},
                   {"logprob", nullptr},
                   {"bytes", piece_bytes(piece)},
                   {"top_logprobs", nullptr}});
    for (auto const& t : c.prompt_scores) out.push_back(logprob_entry(t, model->piece(t.token)));
    return out;
  }

  /// /v1/completions' logprobs object over chat-form `entries` from `from`, whose text starts at
  /// byte `offset` of the choice's text.
  static nlohmann::json completion_logprobs(nlohmann::json const& entries, std::size_t from,
                                            std::size_t offset) {
    auto toks = nlohmann::json::array(), lps = nlohmann::json::array(),
         tops = nlohmann::json::array(), offsets = nlohmann::json::array();
    for (auto k = from; k < entries.size(); ++k) {
      auto const& e = entries[k];
      toks.push_back(e["token"]);
      lps.push_back(e["logprob"]);
      offsets.push_back(offset);
      offset += e["bytes"].size();
      if (e["top_logprobs"].is_null()) {
        tops.push_back(nullptr);
        continue;
      }
      auto m = nlohmann::json::object();
      for (auto const& t : e["top_logprobs"]) m[t["token"].get<std::string>()] = t["logprob"];
      tops.push_back(m);
    }
    return {{"tokens", toks},
            {"token_logprobs", lps},
            {"top_logprobs", tops},
            {"text_offset", offsets}};
  }

  /// The echoed prompt's bytes before the completion's (its entries' offsets start there).
  std::size_t echo_bytes(choice_state const& c) const {
    return req.echo ? c.prompt_text.size() : 0;
  }

  /// vLLM's prompt_logprobs: null for the first token, then per token {id: {logprob, rank,
  /// decoded_token}} for the token and its alternatives.
  nlohmann::json vllm_prompt_logprobs(choice_state const& c) const {
    auto out = nlohmann::json::array();
    if (c.prompt_ids.empty()) return out;
    out.push_back(nullptr);
    for (auto const& t : c.prompt_scores) {
      auto m = nlohmann::json::object();
      m[std::to_string(t.token)] = {{"logprob", t.logprob},
                                    {"rank", t.rank},
                                    {"decoded_token", detail::valid_utf8(model->piece(t.token))}};
      std::int32_t rank = 0;
      for (auto const& alt : t.top) {
        ++rank;
        if (alt.token == t.token) continue;
        m[std::to_string(alt.token)] = {
            {"logprob", alt.logprob},
            {"rank", rank},
            {"decoded_token", detail::valid_utf8(model->piece(alt.token))}};
      }
      out.push_back(std::move(m));
    }
    return out;
  }

  /// The whole (non-streamed) reply once every choice is done.
  nlohmann::json reply() {
    auto list = nlohmann::json::array();
    for (std::size_t i = 0; i < choices.size(); ++i) {
      auto& c = choices[i];
      auto text = c.text.take(true);
      nlohmann::json choice{{"index", i}};
      if (req.chat) {
        parse(c, text, true);
        nlohmann::json msg{{"role", "assistant"}};
        bool const calls = !c.tool_calls.empty();
        msg["content"] = calls && c.content.empty() ? nlohmann::json() : nlohmann::json(c.content);
        if (!c.reasoning.empty()) msg["reasoning_content"] = c.reasoning;
        if (calls) msg["tool_calls"] = c.tool_calls;
        choice["message"] = std::move(msg);
        choice["logprobs"] =
            req.logprobs ? nlohmann::json{{"content", c.logprobs}} : nlohmann::json();
      } else {
        choice["text"] = req.echo ? c.prompt_text + text : text;
        auto entries = req.echo && req.logprobs ? prompt_entries(c) : nlohmann::json::array();
        for (auto const& e : c.logprobs) entries.push_back(e);
        choice["logprobs"] = req.logprobs ? completion_logprobs(entries, 0, 0) : nlohmann::json();
      }
      if (req.prompt_logprobs >= 0) choice["prompt_logprobs"] = vllm_prompt_logprobs(c);
      choice["finish_reason"] = finish_text(c);
      list.push_back(choice);
    }
    return {{"id", id},           {"object", req.chat ? "chat.completion" : "text_completion"},
            {"created", created}, {"model", model_id},
            {"choices", list},    {"usage", usage()},
            {"tf", tf_block()}};
  }

  /// A stream chunk around `choices`.
  nlohmann::json chunk(nlohmann::json list) const {
    return {{"id", id},
            {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model_id},
            {"choices", std::move(list)}};
  }

  /// A chunk carrying choice `i`'s new text (and its logprobs from `from`).
  nlohmann::json text_chunk(std::size_t i, std::string const& text, std::size_t from) const {
    auto const& c = choices[i];
    nlohmann::json ch{{"index", i}, {"finish_reason", nullptr}};
    if (req.chat) {
      auto lp = nlohmann::json::array();
      for (auto k = from; k < c.logprobs.size(); ++k) lp.push_back(c.logprobs[k]);
      ch["delta"] = {{"content", text}};
      ch["logprobs"] = req.logprobs ? nlohmann::json{{"content", lp}} : nlohmann::json();
    } else {
      ch["text"] = text;
      ch["logprobs"] = req.logprobs ? completion_logprobs(c.logprobs, from, offset_of(c, from))
                                    : nlohmann::json();
    }
    return chunk({ch});
  }

  /// Byte offset in choice `c`'s text (echo included) of its generated token `k`.
  std::size_t offset_of(choice_state const& c, std::size_t k) const {
    std::size_t at = echo_bytes(c);
    for (std::size_t i = 0; i < k && i < c.logprobs.size(); ++i)
      at += c.logprobs[i]["bytes"].size();
    return at;
  }

  /// A completions chunk carrying choice `i`'s echoed prompt (with its logprobs when asked).
  nlohmann::json echo_chunk(std::size_t i) const {
    auto const& c = choices[i];
    nlohmann::json ch{{"index", i},
                      {"finish_reason", nullptr},
                      {"text", req.echo ? c.prompt_text : std::string()}};
    ch["logprobs"] = req.logprobs ? completion_logprobs(prompt_entries(c), 0, 0) : nlohmann::json();
    if (req.prompt_logprobs >= 0) ch["prompt_logprobs"] = vllm_prompt_logprobs(c);
    return chunk({ch});
  }

  /// Chat chunks for choice `i`'s parsed piece: reasoning and content (with the logprobs from
  /// `from`) in one, then each tool call's id and name, then its arguments.
  std::vector<nlohmann::json> chat_chunks(std::size_t i, chat_piece const& p,
                                          std::size_t from) const {
    auto const& c = choices[i];
    std::vector<nlohmann::json> out;
    if (!p.reasoning.empty() || !p.content.empty() || c.logprobs.size() > from) {
      auto lp = nlohmann::json::array();
      for (auto k = from; k < c.logprobs.size(); ++k) lp.push_back(c.logprobs[k]);
      nlohmann::json delta = nlohmann::json::object();
      if (!p.reasoning.empty()) delta["reasoning_content"] = p.reasoning;
      if (!p.content.empty() || p.reasoning.empty()) delta["content"] = p.content;
      out.push_back(
          chunk({{{"index", i},
                  {"delta", delta},
                  {"logprobs", req.logprobs ? nlohmann::json{{"content", lp}} : nlohmann::json()},
                  {"finish_reason", nullptr}}}));
    }
    auto k = c.tool_calls.size() - p.calls.size();
    for (auto const& tc : p.calls) {
      nlohmann::json head{{"index", k},
                          {"id", tc["id"]},
                          {"type", "function"},
                          {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}};
      nlohmann::json args{{"index", k}, {"function", {{"arguments", tc["function"]["arguments"]}}}};
      for (auto* d : {&head, &args})
        out.push_back(chunk({{{"index", i},
                              {"delta", {{"tool_calls", {*d}}}},
                              {"logprobs", nullptr},
                              {"finish_reason", nullptr}}}));
      ++k;
    }
    return out;
  }

  /// Choice `i`'s last chunk: its finish reason and its tf block.
  nlohmann::json final_chunk(std::size_t i) const {
    auto const& c = choices[i];
    nlohmann::json ch{{"index", i}, {"finish_reason", finish_text(c)}};
    if (req.chat)
      ch["delta"] = nlohmann::json::object();
    else
      ch["text"] = "";
    ch["logprobs"] = nullptr;
    auto out = chunk({ch});
    out["tf"] = choice_block(c);
    return out;
  }
};

}  // namespace tf::serve
