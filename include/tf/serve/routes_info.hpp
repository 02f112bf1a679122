#pragma once
/// The routes around the completions: /health, /v1/models, /v1/load, /metrics, and llama-server's
/// /props, /tokenize and /detokenize.
#include <tf/serve/completion_job.hpp>
#include <tf/serve/detail/json_depth.hpp>
#include <tf/serve/server_state.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace tf::serve {

namespace detail {

/// The server's sampling defaults as JSON: each value and where it came from.
inline nlohmann::json defaults_json(sample::sampling_defaults const& d) {
  // A float as its shortest decimal (0.8, not 0.800000011920929).
  auto num = [](auto v) -> nlohmann::json {
    if constexpr (std::is_floating_point_v<decltype(v)>)
      return std::stod(fmt::format("{}", v));
    else
      return v;
  };
  auto one = [&](auto const& s) {
    return nlohmann::json{{"value", num(s.value)}, {"source", s.source}};
  };
  return {{"temperature", one(d.temperature)},
          {"top_k", one(d.top_k)},
          {"top_p", one(d.top_p)},
          {"min_p", one(d.min_p)},
          {"repetition_penalty", one(d.repetition_penalty)}};
}

inline nlohmann::json parse_body(std::string const& text) {
  if (detail::json_depth(text, detail::max_request_depth) > detail::max_request_depth)
    throw api_error(400, "the request body nests too deep", "invalid_request_error", "",
                    "invalid_json");
  auto body = nlohmann::json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    throw api_error(400, "the request body must be a JSON object", "invalid_request_error", "",
                    "invalid_json");
  return body;
}

/// Text -> ids; without `add_special` the ids encode adds to any text (BOS) are left out.
inline std::vector<std::int32_t> tokenize(served_model const& b, std::string const& text,
                                          bool add_special) {
  auto ids = b.encode_text(text);
  if (add_special) return ids;
  auto const special = b.encode_text("");
  if (!special.empty() && ids.size() >= special.size() &&
      std::equal(special.begin(), special.end(), ids.begin()))
    ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(special.size()));
  return ids;
}

}  // namespace detail

/// Installs the info routes and the tokenizer routes on `http`.
inline void install_info_routes(httplib::Server& http, server_state& s) {
  http.Get("/health", [&s](httplib::Request const&, httplib::Response& res) {
    if (s.model()) {
      res.set_content(R"({"status":"ok"})", "application/json");
    } else {
      res.status = 503;
      res.set_content(nlohmann::json{{"status", "loading"}, {"progress", s.progress()}}.dump(),
                      "application/json");
    }
  });
  http.Get("/v1/models", [&s](httplib::Request const&, httplib::Response& res) {
    auto b = s.ready_model();
    nlohmann::json j{{"object", "list"},
                     {"data",
                      {{{"id", s.model_id(*b)},
                        {"object", "model"},
                        {"created", s.started()},
                        {"owned_by", "tf"},
                        {"context_length", b->config().context},
                        {"max_model_len", b->config().context},
                        {"parallel", b->config().parallel},
                        {"sampling_defaults", detail::defaults_json(s.config().sampling)}}}}};
    res.set_content(j.dump(), "application/json");
  });
  http.Get("/v1/load", [&s](httplib::Request const&, httplib::Response& res) {
    auto b = s.ready_model();
    auto l = b->load();
    nlohmann::json j{{"running", l.running},
                     {"queued", l.queued},
                     {"requeued", l.requeued},
                     {"pages",
                      {{"free", l.pages_free},
                       {"held", l.pages_held},
                       {"promised", l.pages_promised},
                       {"store", l.pages_store},
                       {"total", l.pages_total}}},
                     {"lanes", {{"total", l.lanes}, {"free", l.lanes_free}}},
                     {"state_slots",
                      {{"free", l.state_slots_free},
                       {"held", l.state_slots_held},
                       {"total", l.state_slots_total}}},
                     {"max_running_seen", l.max_running_seen},
                     {"rounds", l.rounds}};
    res.set_content(j.dump(), "application/json");
  });
  // llama-server's /props, with what the web page needs: the mode that suits the model (chat
  // when it brings its own template; a base model gets the completion page) and the budget lines.
  http.Get("/props", [&s](httplib::Request const&, httplib::Response& res) {
    auto b = s.ready_model();
    auto const start = s.start();
    auto const tmpl = b->chat_template();
    bool const chat = !tmpl.empty();
    nlohmann::json j{{"model", s.model_id(*b)},
                     {"total_slots", b->config().parallel},
                     {"n_ctx", b->config().context},
                     {"chat_template", detail::valid_utf8(tmpl)},
                     {"chat", chat},
                     {"own_chat_template", start.own_chat_template},
                     {"page_mode", chat && start.own_chat_template ? "chat" : "completion"},
                     {"start_lines", start.lines},
                     {"sampling_defaults", detail::defaults_json(s.config().sampling)}};
    res.set_content(j.dump(), "application/json");
  });
  // vLLM's tokenizer facts, which remote tokenizers (lm-evaluation-harness) read first.
  http.Get("/tokenizer_info", [&s](httplib::Request const&, httplib::Response& res) {
    auto b = s.ready_model();
    auto const bos = b->encode_text("");
    auto const stops = b->stop_tokens();
    nlohmann::json j{
        {"tokenizer_class", "tf"},
        {"model_max_length", b->config().context},
        {"vocab_size", b->vocab_size()},
        {"bos_token", bos.empty() ? nlohmann::json() : nlohmann::json(b->token_text(bos[0]))},
        {"eos_token", stops.empty() ? nlohmann::json() : nlohmann::json(b->token_text(stops[0]))},
        {"pad_token", nullptr},
        {"chat_template", b->chat_template()}};
    res.set_content(detail::dump_json(j), "application/json");
  });
  http.Get("/metrics", [&s](httplib::Request const&, httplib::Response& res) {
    auto b = s.ready_model();
    res.set_content(b->stats().prometheus(b->load(), s.model_id(*b)), "text/plain; version=0.0.4");
  });
  // llama-server's shapes: {"content", "add_special" (default false), "with_pieces"} ->
  // {"tokens": [id...]} or {"tokens": [{"id", "piece"}...]}; vLLM's {"prompt",
  // "add_special_tokens" (default true)} too, answered with its "count" and "max_model_len".
  http.Post("/tokenize", [&s](httplib::Request const& req, httplib::Response& res) {
    auto b = s.ready_model();
    try {
      auto const body = detail::parse_body(req.body);
      bool const vllm = !body.contains("content") && body.contains("prompt");
      char const* const key = vllm ? "prompt" : "content";
      if (!body.contains(key) || !body[key].is_string()) throw detail::bad_param(key, "a string");
      bool const add_special = vllm ? detail::boolean(body, "add_special_tokens", true)
                                    : detail::boolean(body, "add_special", false);
      bool const with_pieces = detail::boolean(body, "with_pieces", false);
      auto const ids = detail::tokenize(*b, body[key].get<std::string>(), add_special);
      auto out = nlohmann::json::array();
      for (auto id : ids) {
        if (with_pieces)
          out.push_back({{"id", id}, {"piece", detail::valid_utf8(b->piece(id))}});
        else
          out.push_back(id);
      }
      nlohmann::json reply{{"tokens", out}};
      if (vllm) {
        reply["count"] = ids.size();
        reply["max_model_len"] = b->config().context;
      }
      res.set_content(detail::dump_json(reply), "application/json");
    } catch (api_error const&) {
      b->stats().rejected_bad_request++;
      throw;
    }
  });
  // {"tokens": [id...]} -> {"content": the pieces joined}, also as vLLM's "prompt".
  http.Post("/detokenize", [&s](httplib::Request const& req, httplib::Response& res) {
    auto b = s.ready_model();
    try {
      auto const body = detail::parse_body(req.body);
      if (!body.contains("tokens") || !body["tokens"].is_array())
        throw detail::bad_param("tokens", "an array of token ids");
      auto const vocab = b->vocab_size();
      std::string text;
      for (auto const& t : body["tokens"]) {
        if (!t.is_number_integer() && !t.is_number_unsigned())
          throw detail::bad_param("tokens", "an array of token ids (integers)");
        auto const id = t.get<std::int64_t>();
        if (id < 0 || (vocab > 0 && static_cast<std::uint64_t>(id) >= vocab) ||
            id > std::numeric_limits<std::int32_t>::max())
          throw api_error(
              400,
              fmt::format("'tokens' holds {}, not a token id (the vocabulary has {})", id, vocab),
              "invalid_request_error", "tokens", "invalid_value");
        text += b->piece(static_cast<std::int32_t>(id));
      }
      res.set_content(detail::dump_json({{"content", text}, {"prompt", text}}), "application/json");
    } catch (api_error const&) {
      b->stats().rejected_bad_request++;
      throw;
    }
  });
}

}  // namespace tf::serve
