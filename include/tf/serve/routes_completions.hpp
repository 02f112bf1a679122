#pragma once
/// POST /v1/chat/completions and /v1/completions: parse, encode, submit n streams to the lane
/// host, then answer whole (status with the finished reply) or as SSE.
#include <tf/serve/chat_format.hpp>
#include <tf/serve/completion_job.hpp>
#include <tf/serve/detail/client_socket.hpp>
#include <tf/serve/server_state.hpp>
#include <tf/serve/tool_calls_stream.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <random>
#include <string>

namespace tf::serve {

namespace detail {

/// A fresh seed for a request without one: 32 bits, so any JSON reader keeps it exact.
inline std::int64_t draw_seed() {
  static thread_local std::random_device rd;
  return static_cast<std::int64_t>(rd());
}

/// The HTTP error for a refused submit.
inline api_error submit_error(stream_submit const& r, httplib::Response& res, bool chat) {
  switch (r.reason) {
    case reject_reason::queue_full:
      res.set_header("Retry-After", "1");
      return api_error(503, r.message, "server_error", "", "queue_full");
    case reject_reason::stopping:
      res.set_header("Retry-After", "5");
      return api_error(503, r.message, "server_error", "", "shutting_down");
    case reject_reason::context_length_exceeded:
      return api_error(400, r.message, "invalid_request_error", chat ? "messages" : "prompt",
                       "context_length_exceeded");
    case reject_reason::larger_than_pool:
      return api_error(400, r.message, "invalid_request_error", "max_tokens", "larger_than_pool");
    default:
      return api_error(400, r.message, "invalid_request_error");
  }
}

}  // namespace detail

/// The two completion routes over the server's shared state.
class completion_routes {
 public:
  explicit completion_routes(server_state& s) : s_(s) {}

  void handle(httplib::Request const& hreq, httplib::Response& res, bool chat) {
    auto j = start(hreq, res, chat);
    if (j->req.stream)
      stream(res, j);
    else
      whole(hreq, res, *j);
  }

 private:
  static api_error bad_request(served_model& b, api_error e) {
    b.stats().rejected_bad_request++;
    return e;
  }

  // Parses, checks against the model and the lanes, encodes and submits every choice.
  std::shared_ptr<completion_job> start(httplib::Request const& hreq, httplib::Response& res,
                                        bool chat) {
    auto b = s_.ready_model();
    auto j = std::make_shared<completion_job>();
    try {
      j->req = parse_openai_request(hreq.body, chat, s_.config().sampling);
    } catch (api_error const& e) {
      throw bad_request(*b, e);
    }
    auto const& rq = j->req;
    auto const lanes = b->config().parallel;
    if (static_cast<std::size_t>(rq.n) > lanes)
      throw bad_request(
          *b, api_error(400,
                        fmt::format("'n' is {}; this server samples at most {} choices at once "
                                    "(its --parallel streams)",
                                    rq.n, lanes),
                        "invalid_request_error", "n", "invalid_value"));
    if (auto const vocab = b->vocab_size(); vocab > 0)
      for (auto const& bias : rq.sampling.logit_bias)
        if (static_cast<std::size_t>(bias.token) >= vocab)
          throw bad_request(
              *b, api_error(400,
                            fmt::format("'logit_bias' names token {}; the vocabulary has {} "
                                        "tokens (0..{})",
                                        bias.token, vocab, vocab - 1),
                            "invalid_request_error", "logit_bias", "invalid_value"));
    j->model = b;
    j->model_id = s_.model_id(*b);
    j->created = static_cast<std::int64_t>(std::time(nullptr));
    j->id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", s_.next_id());
    j->seed = rq.seed ? *rq.seed : detail::draw_seed();
    auto const prompts = encode_prompts(*b, rq);
    auto const choices = prompts.size() * static_cast<std::size_t>(rq.n);
    if (choices > lanes + b->config().max_queue)
      throw bad_request(
          *b, api_error(400,
                        fmt::format("{} prompts x 'n' {} ask for {} choices; this server runs {} "
                                    "streams and queues {} more",
                                    prompts.size(), rq.n, choices, lanes, b->config().max_queue),
                        "invalid_request_error", "prompt", "invalid_value"));
    generation_request g;
    g.max_tokens = rq.max_tokens;
    g.sampling = rq.sampling;
    if (!rq.ignore_eos) g.stop_tokens = b->stop_tokens();
    g.reuse_prefix = rq.cache_prompt;
    g.draft = rq.draft.value_or(true);
    g.prompt_logprobs = rq.prompt_logprobs;
    if (chat)
      g.sampling.constraint = grammar::bind_to_model(forced_format(*b, rq, prompts[0].ids), b);
    else
      g.sampling.constraint = grammar::bind_to_model(rq.response_format, b);
    auto const parser = chat ? reply_parser_for(*b, rq, prompts[0].ids) : reply_parser();
    j->choices.resize(choices);
    for (std::size_t i = 0; i < j->choices.size(); ++i) {
      auto& c = j->choices[i];
      auto const& p = prompts[i / static_cast<std::size_t>(rq.n)];
      if (i % static_cast<std::size_t>(rq.n) == 0) j->prompt_tokens += p.ids.size();
      c.text = text_assembler(rq.stop);
      c.parser = parser;
      c.prompt_text = p.text;
      c.prompt_ids = p.ids;
      // Choice k of a prompt samples with seed + k, whatever else the request holds.
      c.seed = static_cast<std::int64_t>(static_cast<std::uint64_t>(j->seed) +
                                         i % static_cast<std::size_t>(rq.n));
      auto gi = g;
      gi.prompt = p.ids;
      gi.sampling.seed = static_cast<std::uint64_t>(c.seed);
      // The prompt's later choices share its first choice's prefill.
      if (i % static_cast<std::size_t>(rq.n) != 0)
        gi.prefill_leader = j->choices[i - i % static_cast<std::size_t>(rq.n)].stream;
      auto r = b->submit(std::move(gi));
      if (r.status == submit_status::rejected) {
        j->cancel_all();
        throw detail::submit_error(r, res, chat);
      }
      c.stream = r.stream;
    }
    return j;
  }

  // The request's prompts as token ids, with the text echo repeats; ids outside the vocabulary
  // are refused here, naming the first.
  std::vector<prompt_input> encode_prompts(served_model& b, openai_request const& rq) {
    std::vector<prompt_input> out;
    try {
      if (rq.chat) {
        out.push_back({{},
                       b.encode_chat_ordered(chat_prompt_messages(rq, b.chat_template()),
                                             chat_template_options(rq)),
                       true});
        return out;
      }
      for (auto const& p : rq.prompts) {
        if (!p.is_ids) {
          out.push_back({p.text, b.encode_text(p.text), false});
          continue;
        }
        auto in = p;
        auto const vocab = b.vocab_size();
        for (std::size_t k = 0; k < in.ids.size() && vocab > 0; ++k)
          if (static_cast<std::size_t>(in.ids[k]) >= vocab)
            throw bad_request(
                b, api_error(400,
                             fmt::format("'prompt' {} has token id {} at position {}; the "
                                         "vocabulary has {} tokens (0..{})",
                                         out.size(), in.ids[k], k, vocab, vocab - 1),
                             "invalid_request_error", "prompt", "invalid_value"));
        for (auto t : in.ids) in.text += b.piece(t);
        out.push_back(std::move(in));
      }
    } catch (error const& e) {
      // The chat template raised (e.g. roles that do not alternate), or an id has no piece.
      throw bad_request(b, api_error(400, e.what(), "invalid_request_error",
                                     rq.chat ? "messages" : "prompt", "invalid_value"));
    }
    return out;
  }

  // The chat reply's parser: reasoning and tool calls as the template teaches them
  // (chat_format.hpp).
  static reply_parser reply_parser_for(served_model const& b, openai_request const& rq,
                                       std::vector<std::int32_t> const& prompt) {
    return serve::reply_parser_for(b, rq, prompt);
  }

  // The grammar a chat reply decodes under (chat_format.hpp's forced_format_for).
  static grammar::response_format forced_format(served_model& b, openai_request const& rq,
                                                std::vector<std::int32_t> const& prompt) {
    try {
      return forced_format_for(b, rq, prompt);
    } catch (api_error const& e) {
      throw bad_request(b, e);
    }
  }

  // Waits for every choice, checking between waits that the client is still connected (a peek,
  // never a write), then answers with the outcome's status: 200, 500 when generation failed, 503
  // when shutdown cancelled it.
  void whole(httplib::Request const& hreq, httplib::Response& res, completion_job& j) {
    int const fd = detail::find_client_socket(hreq.remote_addr, hreq.remote_port, hreq.local_port);
    auto const tick = std::chrono::milliseconds(std::max(1, s_.config().client_check_ms));
    while (!j.all_done()) {
      bool waited = false;
      for (auto& c : j.choices) {
        if (c.done) continue;
        j.pull(c, waited ? std::chrono::milliseconds(0) : tick);
        waited = true;
      }
      if (!j.all_done() && detail::peer_closed(fd)) {
        j.cancel_all();
        res.status = 499;  // nobody reads it: the client has gone
        return;
      }
    }
    for (auto const& c : j.choices) {
      if (c.reason == finish_reason::error)
        throw api_error(500, c.error.empty() ? "generation failed" : c.error, "server_error");
      if (c.reason == finish_reason::cancelled)
        throw api_error(503, "the server stopped before the reply was finished", "server_error", "",
                        "shutting_down");
    }
    res.status = 200;
    res.set_content(detail::dump_json(j.reply()), "application/json");
  }

  void stream(httplib::Response& res, std::shared_ptr<completion_job> const& j) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [j](std::size_t, httplib::DataSink& sink) { return stream_step(*j, sink); },
        [j](bool ok) {
          if (!ok) j->cancel_all();
        });
  }

  static bool send_event(httplib::DataSink& sink, nlohmann::json const& v) {
    auto s = "data: " + detail::dump_json(v) + "\n\n";
    return sink.write(s.data(), s.size());
  }

  static bool cancel_write(completion_job& j) {
    j.cancel_all();
    return false;
  }

  // One step of an SSE reply: the role (chat) or the echoed prompt first, then whatever each
  // choice produced, each choice's last chunk as it ends, and usage and [DONE] after the last.
  static bool stream_step(completion_job& j, httplib::DataSink& sink) {
    for (std::size_t i = 0; i < j.choices.size(); ++i) {
      auto& c = j.choices[i];
      if (j.req.chat && !c.sent_role) {
        c.sent_role = true;
        if (!send_event(sink, j.chunk({{{"index", i},
                                        {"delta", {{"role", "assistant"}, {"content", ""}}},
                                        {"logprobs", nullptr},
                                        {"finish_reason", nullptr}}})))
          return cancel_write(j);
      }
    }
    bool sent = false, waited = false, failed = false;
    for (std::size_t i = 0; i < j.choices.size(); ++i) {
      auto& c = j.choices[i];
      if (c.sent_final) continue;
      auto const before = c.logprobs.size();
      j.pull(c, std::chrono::milliseconds(waited ? 0 : 250));
      waited = true;
      // The echoed prompt leads, once its logprobs (which come before any token) are in.
      if (!j.req.chat && (j.req.echo || j.req.prompt_logprobs >= 0) && !c.sent_echo) {
        if (!j.prompt_scored(c)) continue;
        c.sent_echo = true;
        if (!send_event(sink, j.echo_chunk(i))) return cancel_write(j);
        sent = true;
      }
      auto text = c.text.take(c.done);
      if (j.req.chat) {
        auto const piece = completion_job::parse(c, text, c.done);
        for (auto const& ev : j.chat_chunks(i, piece, before)) {
          if (!send_event(sink, ev)) return cancel_write(j);
          sent = true;
        }
      } else if (!text.empty() || c.logprobs.size() > before) {
        if (!send_event(sink, j.text_chunk(i, text, before))) return cancel_write(j);
        sent = true;
      }
      if (!c.done) continue;
      c.sent_final = true;
      sent = true;
      if (c.reason == finish_reason::error) {
        send_event(sink, api_error(500, c.error, "server_error").body());
        failed = true;
        break;
      }
      if (!send_event(sink, j.final_chunk(i))) return cancel_write(j);
    }
    bool const finished = failed || std::all_of(j.choices.begin(), j.choices.end(),
                                                [](choice_state const& c) { return c.sent_final; });
    if (!finished) {
      // An SSE comment keeps the line alive and notices a client that left.
      if (!sent && !sink.write(": \n\n", 4)) return cancel_write(j);
      return true;
    }
    if (failed) {
      j.cancel_all();
    } else if (j.req.include_usage) {
      auto u = j.chunk(nlohmann::json::array());
      u["usage"] = j.usage();
      u["tf"] = j.tf_block();
      send_event(sink, u);
    }
    std::string const done = "data: [DONE]\n\n";
    sink.write(done.data(), done.size());
    sink.done();
    return true;
  }

  server_state& s_;
};

}  // namespace tf::serve
