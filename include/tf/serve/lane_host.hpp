#pragma once
/// The lane host: one engine thread that runs every request in lane rounds (cancels, admission,
/// one prompt chunk, one batched decode round over every running stream) on a family's KV pool:
/// the paged pool, or a ledgerPool such as kv::hybrid_pool with recurrent-state slots.
#include <tf/error.hpp>
#include <tf/family.hpp>
#include <tf/sample/sampler.hpp>
#include <tf/serve/batched_model.hpp>
#include <tf/serve/draft_source.hpp>
#include <tf/serve/lane_admission.hpp>
#include <tf/serve/metrics.hpp>
#include <tf/serve/request_stream.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tf::serve {

/// The stop census (kv::census): `promised 0, free N + store S == total N` once balanced, plus
/// `; slots free F + held H == T` for a pool with recurrent-state slots.
using census = kv::census;

/// Lane host settings.
struct host_config {
  std::size_t parallel = 4;         // streams in the rounds at once
  std::size_t context = 4096;       // token window per stream
  std::size_t max_queue = 64;       // waiting requests before queue_full
  std::size_t prefill_chunk = 256;  // prompt tokens per round
  // Tensor parallelism: rank 0 of `ranks` hands its admission decisions to `decisions` as it
  // makes them, for the other ranks' pools to replay (serve/rank_replay.hpp).
  int ranks = 1;
  std::function<void(std::vector<decision>)> decisions = {};
};

/// Runs every request of `Model` through the lane rounds on one engine thread; `Family` binds
/// its pool to the KV ledger (lane_admission), the only admission check. With a pool of
/// recurrent-state slots, the model's last `parallel` slots hold each lane's prompt-end state
/// (what a kept prompt stores) and the pool gets the others.
template <batched_model Model, class Family>
requires drives_pool<Model, pool_of<Family>>
class lane_host {
 public:
  using clock = std::chrono::steady_clock;
  using pool_type = pool_of<Family>;
  static constexpr bool has_state = pool_with_state_slots<pool_type>;

  /// `drafts`: speculative drafts, verified in the decode round (none without a source).
  lane_host(Model& model, host_config cfg, metrics* m = nullptr, draft_config drafts = {})
      : model_(model),
        cfg_(check(cfg)),
        metrics_(m ? m : &own_metrics_),
        draft_(std::move(drafts)),
        slots_per_lane_(lane_slots(model, cfg_, draft_)),
        drafts_on_(draft_.source && draft_.max_tokens > 0 && (!has_state || slots_per_lane_ == 2)),
        observe_(observes(model, draft_, drafts_on_)),
        admission_(
            pool_config_from<pool_type>::make(model, pool_slots(model, cfg_, slots_per_lane_)),
            admission_config(cfg_)) {
    if (model_.page_tokens() == 0) throw error("tf: the model's page size is 0 tokens");
    if (drafts_on_) {
      metrics_->draft_source = std::string(draft_.source->name());
      draft_.source->bind_target_pool({static_cast<std::int32_t>(model_.num_pages()),
                                       static_cast<std::int32_t>(model_.page_tokens())});
    }
    if constexpr (has_state)
      for (auto s = static_cast<std::size_t>(pool_slots(model, cfg_, slots_per_lane_));
           s < static_cast<std::size_t>(model_.num_state_slots()); ++s)
        free_lane_slots_.push_back(static_cast<std::int32_t>(s));
    publish_locked();
    engine_ = std::thread([this] { run(); });
  }
  lane_host(lane_host const&) = delete;
  lane_host& operator=(lane_host const&) = delete;
  ~lane_host() { shutdown(std::chrono::milliseconds(0)); }

  host_config const& config() const { return cfg_; }
  /// The recurrent-state slots the admission pool gets for `c` (the model's, less the lanes'):
  /// what another rank's mirror of the pool is built with.
  static std::int64_t admission_slots(Model const& m, host_config const& c, draft_config const& d) {
    return pool_slots(m, c, lane_slots(m, c, d));
  }
  /// Whether streams draft (a source is set and the pool can take rejected drafts back).
  bool drafting() const { return drafts_on_; }
  metrics& stats() { return *metrics_; }

  /// Queues a request for admission; refuses it at once when it can never run or the queue is full.
  stream_submit submit(generation_request req) {
    stream_submit out;
    auto const n = req.prompt.size();
    if (n == 0) return reject(out, reject_reason::bad_request, "the prompt has no tokens");
    for (auto t : req.prompt)
      if (t < 0 || static_cast<std::size_t>(t) >= vocab())
        return reject(out, reject_reason::bad_request,
                      fmt::format("prompt token {} is outside the vocabulary of {}", t, vocab()));
    if (n >= cfg_.context) {
      metrics_->rejected_context++;
      return reject(out, reject_reason::context_length_exceeded,
                    fmt::format("the prompt has {} tokens; this server's context window is {} "
                                "tokens per stream (at least 1 must be left to generate)",
                                n, cfg_.context));
    }
    try {
      sample::validate(req.sampling);
    } catch (tf::error const& e) {
      return reject(out, reject_reason::bad_request, e.what());
    }
    std::size_t const room = cfg_.context - n;
    req.max_tokens = static_cast<int>(
        req.max_tokens < 0 ? room : std::min(room, static_cast<std::size_t>(req.max_tokens)));
    auto s = std::make_shared<request_stream>();
    s->prompt_tokens_ = n;
    // A scored prompt runs afresh: a kept prefix has no logits to give.
    if (req.prompt_logprobs >= 0) req.reuse_prefix = false;
    auto leader = std::exchange(req.prefill_leader, nullptr);
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return reject(out, reject_reason::stopping, "the server is shutting down");
      auto id = ++next_id_;
      auto it = leader ? prefilling_.find(leader.get()) : prefilling_.end();
      bool const same =
          it != prefilling_.end() && req.reuse_prefix && it->second.prompt == req.prompt;
      // A choice whose leader has written the prompt and runs on shares its pages now.
      if (same && it->second.written)
        admission_.keep_prefix(it->second.leader_id, std::span<std::int32_t const>(req.prompt));
      // A choice whose leader still reads the same prompt waits for the leader's pages.
      if (same && !it->second.written) {
        auto l = std::make_unique<lane>();
        l->id = id;
        l->req = std::move(req);
        l->stream = s;
        l->arrived = clock::now();
        it->second.followers.push_back(std::move(l));
        out.status = submit_status::queued;
        out.stream = std::move(s);
        publish_locked();
        return out;
      }
      auto r = admission_.submit({id, req.prompt, req.max_tokens, req.reuse_prefix});
      if (r.status == submit_status::rejected) {
        bool const full = r.kind == reject_kind::queue_full;
        (full ? metrics_->rejected_queue_full : metrics_->rejected_larger_than_pool)++;
        return reject(out, full ? reject_reason::queue_full : reject_reason::larger_than_pool,
                      r.reason);
      }
      auto l = std::make_unique<lane>();
      l->id = id;
      l->req = std::move(req);
      l->stream = s;
      l->arrived = clock::now();
      // Only a pool without state slots shares a prompt's pages with a running stream.
      if (!has_state && l->req.reuse_prefix) {
        auto& g = prefilling_[s.get()];
        g.prompt = l->req.prompt;
        g.leader_id = id;
      }
      if (r.status == submit_status::admitted) {
        l->reused = r.reused_tokens;
        l->reuse_slot = r.reuse_slot;
      }
      if (r.status == submit_status::admitted)
        inbox_.push_back(std::move(l));
      else
        waiting_.push_back(std::move(l));
      out.status = r.status;
      publish_locked();
    }
    cv_.notify_all();
    out.stream = std::move(s);
    return out;
  }

  /// Running, queued, requeued, pages, lanes and state slots, as of the last round.
  load_snapshot load() const {
    std::lock_guard lock(mutex_);
    return snapshot_;
  }

  /// The census of the pool now (balanced once every request is done).
  census count() const {
    std::lock_guard lock(mutex_);
    return admission_.census();
  }

  /// Stops taking requests, lets running ones finish for `grace`, cancels the rest, joins the
  /// engine thread and returns the stop census.
  census shutdown(std::chrono::milliseconds grace) {
    {
      std::lock_guard lock(mutex_);
      if (!stopping_) drain_deadline_ = clock::now() + grace;
      stopping_ = true;
    }
    cv_.notify_all();
    if (engine_.joinable()) engine_.join();
    return count();
  }

 private:
  struct lane {
    std::uint64_t id = 0;
    generation_request req;
    std::shared_ptr<request_stream> stream;
    std::int64_t reused = 0;            // prompt tokens the prompt store already had
    std::int32_t reuse_slot = -1;       // the kept state those tokens left (slotted pools)
    std::int64_t held = 0;              // tokens the pool holds for the stream
    std::vector<std::int32_t> pages;    // page table, refreshed after each hold
    std::int32_t slot = -1;             // the stream's recurrent-state slot, or -1
    std::int32_t snapshot = -1;         // the lane's slot for the state at keep_at
    std::size_t keep_at = 0;            // prompt tokens a keep stores (whole pages)
    bool snapshotted = false;           // the snapshot holds the state at keep_at
    std::size_t pos = 0;                // tokens in the KV
    std::vector<std::int32_t> history;  // prompt + generated
    std::int32_t pending = -1;          // sampled, not yet in the KV
    int generated = 0;
    bool stream_done = false;
    std::optional<sample::sampler> sampler;
    std::vector<std::int32_t> drafts;  // proposed to follow `pending`, verified this round
    std::size_t draft_len = 0;         // drafts to ask for: follows the measured acceptance
    std::size_t draft_pause = 0;       // rounds left without drafts after they kept failing
    std::size_t draft_backoff = 0;     // the next pause's length
    double draft_rate = 1;             // recent share of drafted tokens accepted
    std::int32_t draft_slot = -1;      // slotted pools: the state before the verify row
    std::vector<sample::sample_result> verdict;  // this round's tokens, to emit in order
    clock::time_point arrived, last_token;
  };

  static lane_config admission_config(host_config const& c) {
    lane_config lc;
    lc.max_running = c.parallel;
    lc.max_queue = c.max_queue;
    lc.ranks = c.ranks;
    lc.log = [](std::string_view) {};  // refusals reach the client as HTTP errors
    return lc;
  }

  // Slots each lane holds beside the pool's: its prompt-end snapshot and, where drafts are
  // asked for and the model has the slots, the state before its verify row.
  static std::size_t lane_slots(Model const& m, host_config const& c, draft_config const& d) {
    if constexpr (has_state) {
      bool const wants = d.source && d.max_tokens > 0;
      return wants && static_cast<std::size_t>(m.num_state_slots()) > 2 * c.parallel ? 2 : 1;
    } else {
      return 0;
    }
  }

  // Slots the pool gets: the model's, less the lanes' own.
  static std::int64_t pool_slots(Model const& m, host_config const& c, std::size_t per_lane) {
    if constexpr (has_state) {
      auto const total = static_cast<std::size_t>(m.num_state_slots());
      if (total <= per_lane * c.parallel)
        throw error(
            "tf: the model has {} recurrent-state slots; a lane host at --parallel {} needs "
            "more: {} per lane (a prompt-end snapshot{}), the rest for streams and kept prompts",
            total, c.parallel, per_lane, per_lane > 1 ? " and the state before drafts" : "");
      return static_cast<std::int64_t>(total - per_lane * c.parallel);
    } else {
      return 0;
    }
  }

  static host_config check(host_config c) {
    if (c.parallel == 0) throw error("tf: lane host needs --parallel >= 1 (got 0)");
    if (c.context < 2) throw error("tf: lane host needs --context >= 2 (got {})", c.context);
    if (c.prefill_chunk == 0) c.prefill_chunk = 256;
    if (c.ranks < 1 || (c.ranks > 1 && !c.decisions))
      throw error("tf: a lane host over {} ranks needs a sink for its decisions", c.ranks);
    return c;
  }

  stream_submit& reject(stream_submit& out, reject_reason r, std::string msg) {
    if (r == reject_reason::bad_request) metrics_->rejected_bad_request++;
    out.status = submit_status::rejected;
    out.reason = r;
    out.message = std::move(msg);
    return out;
  }

  // Holds pages for tokens [l.pos, l.pos + n) (those not held yet), copies a shared last page
  // the stream writes into, and refreshes the page table.
  void hold(lane& l, std::size_t n) {
    std::optional<kv::page_copy> copy;
    {
      std::lock_guard lock(mutex_);
      auto const upto = static_cast<std::int64_t>(l.pos + n);
      if (upto > l.held) {
        copy = admission_.on_tokens(l.id, upto - l.held);
        l.held = upto;
      }
      auto t = admission_.page_table(l.id);
      l.pages.assign(t.begin(), t.end());
    }
    // Pages are written only by forwards on this thread, so `from` is intact until the next one.
    if (copy) model_.copy_page(copy->from, copy->to);
  }

  // Copies the stream's state, now at keep_at, into the lane's snapshot slot.
  void take_snapshot(lane& l) {
    if (l.keep_at == 0 || l.snapshotted) return;
    model_.copy_state(l.slot, l.snapshot);
    l.snapshotted = true;
  }

  // Submits the choices waiting for `l`'s prompt, once its pages are written or it ended; with
  // the prompt kept as an entry of the store, each reuses all of it but the last token. While
  // `l` runs on, the group stays (written) for choices submitted after its prefill.
  void release_followers(lane& l) {
    std::lock_guard lock(mutex_);
    auto it = prefilling_.find(l.stream.get());
    if (it == prefilling_.end()) return;
    auto followers = std::move(it->second.followers);
    bool const live = l.pos >= l.req.prompt.size() && !l.stream_done;
    if (live)
      it->second.written = true;
    else
      prefilling_.erase(it);
    if (followers.empty()) return;
    if (live) admission_.keep_prefix(l.id, std::span<std::int32_t const>(l.req.prompt));
    for (auto& f : followers) {
      auto r = admission_.submit({f->id, f->req.prompt, f->req.max_tokens, f->req.reuse_prefix});
      if (r.status == submit_status::rejected) {
        metrics_->requests_finished++;
        f->stream->finish(finish_reason::error, "tf: " + r.reason);
        continue;
      }
      if (r.status == submit_status::admitted) {
        f->reused = r.reused_tokens;
        f->reuse_slot = r.reuse_slot;
        inbox_.push_back(std::move(f));
      } else {
        waiting_.push_back(std::move(f));
      }
    }
    cv_.notify_all();
  }

  void end(lane& l, finish_reason why, std::string err = {}) {
    release_followers(l);
    // What the stream wrote (prompt, then generated tokens) is kept for prefix reuse, unless a
    // forward failed: then its KV and state may be partial.
    bool const keep = why != finish_reason::error && l.pos > 0;
    auto const written = std::span<std::int32_t const>(l.history).first(keep ? l.pos : 0);
    {
      std::lock_guard lock(mutex_);
      if constexpr (has_state) {
        // The stream's slot holds the state after all it wrote; the snapshot the state at the
        // prompt's end, kept as its own entry so the same prompt can be sent again.
        if (keep && l.snapshotted && l.keep_at < l.pos) {
          auto const at = admission_.keep_prefix(l.id, written.first(l.keep_at));
          if (at >= 0) model_.copy_state(l.snapshot, at);
        }
        if (l.snapshot >= 0) free_lane_slots_.push_back(std::exchange(l.snapshot, -1));
        if (l.draft_slot >= 0) free_lane_slots_.push_back(std::exchange(l.draft_slot, -1));
      }
      admission_.finish(l.id, written);
      prefilling_.erase(l.stream.get());
    }
    l.stream_done = true;
    if (why == finish_reason::cancelled) metrics_->cancelled++;
    metrics_->requests_finished++;
    l.stream->finish(why, std::move(err));
  }

  // Records a sampled token; the request ends on a stop token, at max_tokens or a full window.
  void emit(lane& l, sample::sample_result r) {
    auto now = clock::now();
    if (l.generated == 0)
      metrics_->ttft.observe(std::chrono::duration<double>(now - l.arrived).count());
    else
      metrics_->inter_token.observe(std::chrono::duration<double>(now - l.last_token).count());
    l.last_token = now;
    ++l.generated;
    metrics_->generation_tokens++;
    auto tok = r.token;
    if (std::find(l.req.stop_tokens.begin(), l.req.stop_tokens.end(), tok) !=
        l.req.stop_tokens.end()) {
      end(l, finish_reason::stop);
      return;
    }
    l.stream->push(std::move(r));
    l.history.push_back(tok);
    l.pending = tok;
    if (l.generated >= l.req.max_tokens || l.pos + 1 >= cfg_.context) end(l, finish_reason::length);
  }

  void start(lane& l) {
    l.history = l.req.prompt;
    l.sampler.emplace(l.req.sampling);
    l.draft_len = draft_.max_tokens;
    l.draft_rate = 1;
    auto const n = l.req.prompt.size();
    l.held = std::max<std::int64_t>(l.reused, 0);
    // Reuse at most prompt-1 tokens: the last one runs again to give the first logits.
    auto reuse = std::min(static_cast<std::size_t>(l.held), n - 1);
    {
      std::lock_guard lock(mutex_);
      auto t = admission_.page_table(l.id);
      l.pages.assign(t.begin(), t.end());
      l.slot = admission_.state_slot(l.id);
    }
    if constexpr (has_state) {
      if (l.slot < 0) throw error("tf: request {} started without a recurrent-state slot", l.id);
      l.snapshot = free_lane_slots_.back();
      free_lane_slots_.pop_back();
      if (drafts_on_) {
        l.draft_slot = free_lane_slots_.back();
        free_lane_slots_.pop_back();
      }
      // The snapshot is the state before the prompt's last token: resent, the prompt reuses
      // all but that token, which runs again to give the first logits.
      l.keep_at = n - 1;
      // The kept state is at the kept prompt's end: resume there. With no token left after it
      // to give the first logits (or no state), start fresh: the forward resets at position 0.
      bool const resume = l.held > 0 && static_cast<std::size_t>(l.held) < n && l.reuse_slot >= 0;
      reuse = resume ? static_cast<std::size_t>(l.held) : 0;
      // Runs before any forward this round, so a kept slot reclaimed since admission is intact.
      if (resume && l.reuse_slot != l.slot) model_.copy_state(l.reuse_slot, l.slot);
    }
    l.pos = reuse;
    if constexpr (has_state)
      if (l.pos == l.keep_at) take_snapshot(l);
    metrics_->prompt_tokens += n - reuse;
    metrics_->prompt_tokens_reused += reuse;
    if (reuse > 0) metrics_->prefix_cache_hits++;
    l.stream->set_cached_tokens(reuse);
  }

  void run() {
    std::vector<float> logits;
    std::vector<batch_row> rows;
    std::vector<lane*> row_lanes;
    std::vector<std::int32_t> tokens;
    for (;;) {
      std::vector<std::unique_ptr<lane>> admitted;
      bool stop_now = false, past_grace = false;
      {
        std::unique_lock lock(mutex_);
        if (running_.empty() && waiting_.empty() && inbox_.empty() && !stopping_) {
          publish_locked();
          cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !inbox_.empty(); });
        }
        past_grace = stopping_ && clock::now() >= drain_deadline_;
        // Cancels of waiting requests: they leave the queue.
        for (auto it = waiting_.begin(); it != waiting_.end();) {
          if ((*it)->stream->cancel_requested() || past_grace) {
            cancel_followers_locked(**it);
            admission_.cancel((*it)->id);
            metrics_->cancelled++;
            metrics_->requests_finished++;
            (*it)->stream->finish(finish_reason::cancelled);
            it = waiting_.erase(it);
          } else {
            ++it;
          }
        }
        // Admission through the ledger, first come first served.
        for (auto& l : inbox_) admitted.push_back(std::move(l));
        inbox_.clear();
        for (auto const& a : admission_.admit_waiting()) {
          auto it = std::find_if(waiting_.begin(), waiting_.end(),
                                 [&](auto const& w) { return w->id == a.id; });
          if (it == waiting_.end()) continue;
          (*it)->reused = a.reused_tokens;
          (*it)->reuse_slot = a.reuse_slot;
          admitted.push_back(std::move(*it));
          waiting_.erase(it);
        }
        stop_now = stopping_ && waiting_.empty() && running_.empty() && admitted.empty();
      }
      if (stop_now) break;
      for (auto& a : admitted) {
        try {
          start(*a);
        } catch (std::exception const& e) {
          end(*a, finish_reason::error, fmt::format("tf: start failed: {}", e.what()));
          continue;
        }
        running_.push_back(std::move(a));
      }
      for (auto& l : running_)
        if (!l->stream_done && (l->stream->cancel_requested() || past_grace))
          end(*l, past_grace ? finish_reason::cancelled : l->stream->cancel_reason());
      std::erase_if(running_, [](auto const& l) { return l->stream_done; });
      max_running_ = std::max(max_running_, running_.size());
      try {
        prefill_round(logits);
        decode_round(logits, rows, row_lanes, tokens);
      } catch (std::exception const& e) {
        for (auto& l : running_)
          if (!l->stream_done)
            end(*l, finish_reason::error, fmt::format("tf: forward failed: {}", e.what()));
      }
      std::erase_if(running_, [](auto const& l) { return l->stream_done; });
      std::lock_guard lock(mutex_);
      ++rounds_;
      publish_locked();
    }
    std::lock_guard lock(mutex_);
    publish_locked();
  }

  // The lane's row for `tokens` at its position: its page table and state slot.
  static batch_row row_of(lane const& l, std::span<std::int32_t const> tokens) {
    batch_row r;
    r.tokens = tokens;
    r.start_pos = static_cast<std::int32_t>(l.pos);
    r.page_table = l.pages;
    r.state_slot = l.slot;
    return r;
  }

  static constexpr bool gives_hidden = requires(Model & m, std::span<batch_row const> r, float* p) {
    m.forward(r, p, p);
  };

  // Whether the drafts read the final hidden states (an MTP head); throws where the source wants
  // them and the model cannot give them.
  static bool observes(Model& m, draft_config const& d, bool on) {
    if (!on || d.source->hidden_size() == 0) return false;
    if constexpr (gives_hidden) {
      if (static_cast<std::size_t>(m.hidden_size()) == d.source->hidden_size()) return true;
      throw error("tf: the {} drafts read hidden states of {} values; the model's are {}",
                  d.source->name(), d.source->hidden_size(), m.hidden_size());
    } else {
      throw error("tf: the {} drafts read the model's hidden states, which it does not give",
                  d.source->name());
    }
  }

  // model_.forward, and every token's final hidden state into hidden_ where drafts read them.
  void run_rows(std::span<batch_row const> rows, float* logits) {
    if constexpr (gives_hidden) {
      if (observe_) {
        std::size_t n = 0;
        for (auto const& r : rows) n += r.tokens.size();
        hidden_.resize(n * draft_.source->hidden_size());
        model_.forward(rows, logits, hidden_.data());
        return;
      }
    }
    model_.forward(rows, logits);
  }

  // Hands the source the hidden states of `n` positions from `first` (hidden_'s rows from
  // `row`); `tokens` is the stream's tokens through them.
  void observe(std::span<std::int32_t const> tokens, std::size_t first, std::size_t row,
               std::size_t n) {
    auto const h = draft_.source->hidden_size();
    draft_.source->observe(tokens, first, std::span<float const>(hidden_).subspan(row * h, n * h));
  }

  // Prompt tokens per round of a scored prompt: its logits rows stay within score_bytes.
  std::size_t score_chunk() const {
    return std::max<std::size_t>(1, score_bytes / (vocab() * sizeof(float)));
  }

  // Logprobs of the prompt tokens each of `n` logits rows from the lane's position predicts.
  void score_prompt(lane& l, std::span<float const> logits, std::size_t n) {
    scored_.clear();
    auto const& prompt = l.req.prompt;
    for (std::size_t j = 0; j < n && l.pos + j + 1 < prompt.size(); ++j)
      scored_.push_back(sample::score_token(logits.subspan(j * vocab(), vocab()),
                                            prompt[l.pos + j + 1], l.req.prompt_logprobs,
                                            score_scratch_));
    l.stream->push_prompt(scored_);
  }

  // One chunk of the oldest prompt still being read.
  void prefill_round(std::vector<float>& logits) {
    for (auto& lp : running_) {
      auto& l = *lp;
      if (l.stream_done || l.pos >= l.req.prompt.size()) continue;
      bool const scored = l.req.prompt_logprobs >= 0;
      auto n = std::min(scored ? score_chunk() : cfg_.prefill_chunk, l.req.prompt.size() - l.pos);
      // A chunk ends at keep_at, so the state a keep stores can be copied there.
      if (has_state && !l.snapshotted && l.keep_at > l.pos) n = std::min(n, l.keep_at - l.pos);
      hold(l, n);
      auto row = row_of(l, std::span<std::int32_t const>(l.req.prompt).subspan(l.pos, n));
      bool const last = l.pos + n == l.req.prompt.size();
      bool const sample_first = last && l.req.max_tokens > 0;
      std::optional<sample::sample_result> first;
      if (scored) {
        row.all_logits = true;
        logits.resize(n * vocab());
        run_rows(std::span<batch_row const>(&row, 1), logits.data());
        score_prompt(l, logits, n);
        if (sample_first)
          first = l.sampler->sample(std::span<float const>(logits).subspan((n - 1) * vocab()),
                                    l.history);
      } else {
        first = read_chunk(l, row, sample_first, logits);
      }
      if (observe_)
        observe(std::span<std::int32_t const>(l.req.prompt).first(l.pos + n), l.pos, 0, n);
      l.pos += n;
      if constexpr (has_state)
        if (l.pos == l.keep_at) take_snapshot(l);
      if (last) release_followers(l);
      if (first) emit(l, std::move(*first));
      if (last && !sample_first) end(l, finish_reason::length);
      return;
    }
  }

  // Runs a prompt chunk that gives no prompt logprobs; samples the first token when asked.
  std::optional<sample::sample_result> read_chunk(lane& l, batch_row const& row, bool sample,
                                                  std::vector<float>& logits) {
    if constexpr (sampling_model<Model>) {
      if (sample && !observe_) {
        sample::sampler* s = &*l.sampler;
        std::span<std::int32_t const> const h = l.history;
        sample::sample_result first;
        model_.forward_sample(std::span<batch_row const>(&row, 1), {&s, 1}, {&h, 1}, {&first, 1});
        return first;
      }
    }
    logits.resize(vocab());
    run_rows(std::span<batch_row const>(&row, 1), logits.data());
    if (sample) return l.sampler->sample(logits, l.history);
    return std::nullopt;
  }

  // One token for every stream past its prompt, and its drafts where it has any, as one batched
  // forward.
  void decode_round(std::vector<float>& logits, std::vector<batch_row>& rows,
                    std::vector<lane*>& row_lanes, std::vector<std::int32_t>& tokens) {
    rows.clear();
    row_lanes.clear();
    tokens.clear();
    for (auto& lp : running_) {
      auto& l = *lp;
      if (l.stream_done || l.pending < 0 || l.pos < l.req.prompt.size()) continue;
      row_lanes.push_back(&l);
    }
    if (row_lanes.empty()) return;
    // Each lane's row: its pending token, then its drafts (tokens grows first, spans after).
    share_budget(row_lanes);
    bool drafted = false;
    for (std::size_t i = 0; i < row_lanes.size(); ++i) {
      auto* l = row_lanes[i];
      tokens.push_back(l->pending);
      // A source writing its own KV from the pending token on (in pages mirroring the target's)
      // needs the pages its drafts will take first; the verify row takes them anyway.
      if (draft_.source && draft_.source->writes_ahead())
        hold(*l, 1 + std::min(draft_caps_[i], wanted(*l)));
      propose(*l, draft_caps_[i]);
      drafted = drafted || !l->drafts.empty();
      tokens.insert(tokens.end(), l->drafts.begin(), l->drafts.end());
    }
    for (std::size_t i = 0, at = 0; i < row_lanes.size(); ++i) {
      auto& l = *row_lanes[i];
      auto const n = 1 + l.drafts.size();
      hold(l, n);
      rows.push_back(row_of(l, std::span<std::int32_t const>(tokens).subspan(at, n)));
      rows.back().all_logits = n > 1;
      at += n;
    }
    // Each lane's tokens of this round go to its verdict, then out in one loop.
    bool sampled = false;
    if constexpr (sampling_model<Model>) {
      if (!drafted && !observe_) {
        std::vector<sample::sampler*> samplers;
        std::vector<std::span<std::int32_t const>> histories;
        for (auto* l : row_lanes) {
          samplers.push_back(&*l->sampler);
          histories.push_back(l->history);
        }
        std::vector<sample::sample_result> results(row_lanes.size());
        auto const start = std::chrono::steady_clock::now();
        model_.forward_sample(std::span<batch_row const>(rows), samplers, histories, results);
        timed(row_lanes.size(), row_lanes.size(), start);
        for (std::size_t i = 0; i < row_lanes.size(); ++i) {
          row_lanes[i]->verdict.clear();
          row_lanes[i]->verdict.push_back(std::move(results[i]));
        }
        sampled = true;
      }
    }
    if (!sampled) {
      // A slotted lane's state before its verify row, to go back to when drafts are rejected.
      if constexpr (has_state)
        for (auto* l : row_lanes)
          if (!l->drafts.empty()) model_.copy_state(l->slot, l->draft_slot);
      logits.resize(static_cast<std::size_t>(logits_rows(rows)) * vocab());
      auto const start = std::chrono::steady_clock::now();
      run_rows(std::span<batch_row const>(rows), logits.data());
      timed(row_lanes.size(), tokens.size(), start);
      for (std::size_t i = 0, at = 0; i < row_lanes.size(); ++i) {
        auto const n = rows[i].tokens.size();
        judge(*row_lanes[i], std::span<float const>(logits).subspan(at * vocab(), n * vocab()));
        at += n;
      }
      // The positions whose tokens stand: the pending one and the accepted drafts.
      if (observe_)
        for (std::size_t i = 0, at = 0; i < row_lanes.size(); ++i) {
          auto const& l = *row_lanes[i];
          auto const n = std::min(l.verdict.size(), rows[i].tokens.size());
          auto const row = std::exchange(at, at + rows[i].tokens.size());
          if (n == 0) continue;
          observed_.assign(l.history.begin(), l.history.end());
          observed_.insert(observed_.end(), l.drafts.begin(),
                           l.drafts.begin() + static_cast<std::ptrdiff_t>(n - 1));
          observe(observed_, l.pos, row, n);
        }
      if constexpr (has_state) replay_accepted(rows, row_lanes, logits);
    }
    for (auto* l : row_lanes)
      for (auto& r : l->verdict) {
        l->pos += 1;  // the token its row ran is in the KV now
        l->pending = -1;
        emit(*l, std::move(r));
        if (l->stream_done) break;
      }
  }

  // The rounds where `streams` streams decode: a round's cost is not one line in its rows (one
  // stream's is mostly reading the weights, eight streams' may be arithmetic already), so each
  // count of streams has its own fit, the last for that many and more.
  struct stream_count_rounds {
    round_cost_fit cost;
    std::size_t drafting = 0;  // rounds that would have drafted while `cost` had no fit
  };
  stream_count_rounds& rounds_of(std::size_t streams) {
    return stream_counts_[std::min(streams, stream_counts_.size()) - 1];
  }

  // A decode round's forward of `rows` positions for `streams` streams, begun at `start`.
  void timed(std::size_t streams, std::size_t rows, std::chrono::steady_clock::time_point start) {
    std::chrono::duration<double> const took = std::chrono::steady_clock::now() - start;
    rounds_of(streams).cost.add(static_cast<double>(rows), took.count());
  }

  // Recurrent state has no per-position rollback: a lane whose row ran past its accepted tokens
  // goes back to the state before the row and runs the accepted ones again (their K and V are
  // written again with the same bits, since a row's bits do not depend on its length).
  void replay_accepted(std::vector<batch_row> const& rows, std::vector<lane*> const& row_lanes,
                       std::vector<float>& logits) {
    replay_rows_.clear();
    for (std::size_t i = 0; i < row_lanes.size(); ++i) {
      auto& l = *row_lanes[i];
      if (l.verdict.size() >= rows[i].tokens.size()) continue;
      model_.copy_state(l.draft_slot, l.slot);
      replay_rows_.push_back(rows[i]);
      replay_rows_.back().tokens = rows[i].tokens.first(l.verdict.size());
      replay_rows_.back().all_logits = false;
    }
    if (replay_rows_.empty()) return;
    logits.resize(replay_rows_.size() * vocab());
    model_.forward(std::span<batch_row const>(replay_rows_), logits.data());
  }

  // The drafts the lane would ask for this round: its adaptive length within the tokens the
  // stream may still generate and its window (none while paused or off).
  std::size_t wanted(lane const& l) const {
    if (!drafts_on_ || !l.req.draft || l.draft_pause > 0) return 0;
    // The row writes positions pos .. pos + k: within the promise (prompt + max_tokens, with
    // `generated` counting the pending token) and the window.
    auto const left = static_cast<std::size_t>(std::max(0, l.req.max_tokens - l.generated));
    return std::min({l.draft_len, left, cfg_.context - l.pos - 1});
  }

  // Shares the round's budget among the lanes by water-filling: every lane gets up to a common
  // level, so a stream's first drafts, the likeliest accepted, come before another's last ones;
  // the lanes past the level take turns from round to round. The round drafts only where the
  // drafts' expected acceptance (each lane's recent rate, weighted by its share) pays for their
  // rows beside the round's streams (draft_config::pays_at): all or none, since a few verify rows
  // cost the batch more per row than many. Lanes held back regain trust slowly, so the round
  // drafts again now and then and the rates are measured anew. draft_caps_[i] is lane i's share.
  void share_budget(std::vector<lane*> const& lanes) {
    auto const n = lanes.size();
    draft_caps_.assign(n, 0);
    auto budget = draft_.round_tokens;
    auto const first = share_turn_++ % n;
    for (bool more = true; more && budget > 0;) {
      more = false;
      for (std::size_t j = 0; j < n && budget > 0; ++j) {
        auto const i = (first + j) % n;
        if (draft_caps_[i] < wanted(*lanes[i])) {
          ++draft_caps_[i];
          --budget;
          more = true;
        }
      }
    }
    double drafts = 0, expected = 0;
    for (std::size_t i = 0; i < n; ++i) {
      drafts += static_cast<double>(draft_caps_[i]);
      expected += static_cast<double>(draft_caps_[i]) * lanes[i]->draft_rate;
    }
    double fixed = draft_.fixed_rows;
    if (draft_.measure_rows && std::isfinite(fixed)) {
      auto& counted = rounds_of(n);
      if (auto const measured = counted.cost.fixed_rows()) {
        fixed = *measured;
      } else if (drafts > 0 && counted.drafting++ % 4 == 3) {
        // Every fourth such round runs plain, so the fit sees rounds of both kinds.
        draft_caps_.assign(n, 0);
        return;
      }
    }
    if (expected >= draft_.pays_at(n, fixed) * drafts) return;
    for (std::size_t i = 0; i < n; ++i)
      if (draft_caps_[i] > 0) {
        draft_caps_[i] = 0;
        lanes[i]->draft_rate += (1 - lanes[i]->draft_rate) / regain_rounds;
      }
  }

  // Asks the draft source for up to `cap` tokens to follow the lane's pending one (cap: its share
  // of the round's budget, at most wanted()).
  void propose(lane& l, std::size_t cap) {
    l.drafts.clear();
    if (!drafts_on_ || !l.req.draft) return;
    if (l.draft_pause > 0) {
      --l.draft_pause;
      return;
    }
    auto const k = std::min(cap, wanted(l));
    if (k == 0) return;
    draft_.source->propose_at(l.history, l.pages, k, l.drafts);
    if (l.drafts.size() > k) l.drafts.resize(k);
    // A source with another vocabulary (a draft model's) may propose ids the target lacks.
    auto const bad = std::find_if(l.drafts.begin(), l.drafts.end(), [&](std::int32_t t) {
      return t < 0 || static_cast<std::size_t>(t) >= vocab();
    });
    l.drafts.erase(bad, l.drafts.end());
  }

  // Samples the lane's rows in order with its own sampler, as plain decode would one round at a
  // time, accepting drafts while the sample equals them and stopping where the stream would end;
  // the tokens go to `verdict`. Each is the target's own sample and takes one draw, so the reply
  // is the one without drafts.
  void judge(lane& l, std::span<float const> logits) {
    auto const k = l.drafts.size();
    l.verdict.clear();
    // Counted before any emit: the client may read the usage as soon as the stream ends.
    if (k > 0) {
      metrics_->draft_rows++;
      metrics_->draft_tokens += k;
      l.stream->add_drafts(k, 0);
      judged_history_.assign(l.history.begin(), l.history.end());
    }
    std::span<std::int32_t const> history = k > 0 ? judged_history_ : l.history;
    std::size_t accepted = 0;
    for (std::size_t j = 0; j <= k; ++j) {
      auto r = l.sampler->sample(logits.subspan(j * vocab(), vocab()), history);
      auto const tok = r.token;
      bool const match = j < k && tok == l.drafts[j];
      l.verdict.push_back(std::move(r));
      if (match) {
        ++accepted;
        metrics_->draft_accepted++;
        l.stream->add_drafts(0, 1);
      }
      if (!match || ends_at(l, tok, j)) break;
      judged_history_.push_back(tok);
      history = judged_history_;
    }
    if (k > 0) adapt(l, k, accepted);
  }

  // Whether emit() ends the stream at the lane's `j`-th token of this round, `tok`.
  bool ends_at(lane const& l, std::int32_t tok, std::size_t j) const {
    auto const& stops = l.req.stop_tokens;
    return std::find(stops.begin(), stops.end(), tok) != stops.end() ||
           l.generated + static_cast<int>(j) + 1 >= l.req.max_tokens ||
           l.pos + j + 2 >= cfg_.context;
  }

  // The next draft length follows the acceptance: longer after a full accept, just past the
  // accepted run after a partial one; drafts that keep failing pause for a doubling while.
  void adapt(lane& l, std::size_t k, std::size_t accepted) {
    auto const most = draft_.max_tokens;
    l.draft_rate += (static_cast<double>(accepted) / static_cast<double>(k) - l.draft_rate) / 4;
    if (accepted == k) {
      l.draft_len = std::min(most, 2 * k);
      l.draft_backoff = 0;
    } else if (accepted > 0) {
      l.draft_len = std::min(most, accepted + 1);
      l.draft_backoff = 0;
    } else {
      l.draft_len = std::max<std::size_t>(1, l.draft_len / 2);
      l.draft_backoff = std::min<std::size_t>(64, l.draft_backoff == 0 ? 1 : 2 * l.draft_backoff);
      l.draft_pause = l.draft_backoff;
    }
  }

  // Ends the choices waiting for a leader that leaves the queue before it ran.
  void cancel_followers_locked(lane& l) {
    auto it = prefilling_.find(l.stream.get());
    if (it == prefilling_.end()) return;
    for (auto& f : it->second.followers) {
      metrics_->cancelled++;
      metrics_->requests_finished++;
      f->stream->finish(finish_reason::cancelled);
    }
    prefilling_.erase(it);
  }

  std::size_t followers_locked() const {
    std::size_t n = 0;
    for (auto const& [stream, p] : prefilling_) n += p.followers.size();
    return n;
  }

  void publish_locked() {
    if (cfg_.ranks > 1)
      if (auto d = admission_.take_decisions(); !d.empty()) cfg_.decisions(std::move(d));
    auto c = admission_.census();
    auto l = admission_.load();
    snapshot_.running = l.running;
    snapshot_.queued = l.queued + followers_locked();
    snapshot_.requeued = l.requeued;
    snapshot_.pages_free = static_cast<std::size_t>(c.free);
    snapshot_.pages_held = static_cast<std::size_t>(c.held);
    snapshot_.pages_promised = static_cast<std::size_t>(c.promised);
    snapshot_.pages_store = static_cast<std::size_t>(c.store);
    snapshot_.pages_total = static_cast<std::size_t>(c.total);
    snapshot_.lanes = cfg_.parallel;
    snapshot_.lanes_free = cfg_.parallel - std::min(cfg_.parallel, l.running);
    snapshot_.state_slots_free = static_cast<std::size_t>(c.slots_free);
    snapshot_.state_slots_held = static_cast<std::size_t>(c.slots_held);
    snapshot_.state_slots_total = static_cast<std::size_t>(c.slots_total);
    snapshot_.max_running_seen = std::max(max_running_, l.running);
    snapshot_.rounds = rounds_;
  }

  // The model's vocabulary size as a count (models report it as any integer type).
  std::size_t vocab() const { return static_cast<std::size_t>(model_.vocab_size()); }

  // The logits rows of one scored prompt chunk: a bounded buffer beside the ledger's memory.
  static constexpr std::size_t score_bytes = std::size_t{32} << 20;
  // A lane held back by the round's acceptance regains 1/regain_rounds of the gap to full trust a
  // round.
  static constexpr double regain_rounds = 32;

  Model& model_;
  host_config cfg_;
  metrics own_metrics_;
  metrics* metrics_;
  draft_config draft_;
  std::size_t slots_per_lane_;  // slotted pools: lane slots (snapshot, draft) per lane
  bool drafts_on_;              // a source is set and the pool can take back rejected drafts
  bool observe_;                // the source reads the final hidden states of what runs
  std::vector<float> hidden_;   // the last run_rows' hidden states, when observe_
  std::vector<std::int32_t> observed_;  // a lane's tokens through the positions it observes

  mutable std::mutex mutex_;  // guards admission_, the queues and the snapshot
  lane_admission<Family> admission_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<lane>> waiting_;
  std::vector<std::unique_ptr<lane>> inbox_;  // admitted at submit, not yet started
  // Streams whose prompt pages other choices of their request may share, by stream.
  struct prefill_group {
    std::vector<std::int32_t> prompt;
    std::uint64_t leader_id = 0;
    bool written = false;  // the leader's prompt pages are written and it runs on
    std::vector<std::unique_ptr<lane>> followers;  // not yet submitted to admission
  };
  std::map<request_stream const*, prefill_group> prefilling_;
  bool stopping_ = false;
  clock::time_point drain_deadline_{};
  load_snapshot snapshot_;
  std::uint64_t rounds_ = 0;
  std::uint64_t next_id_ = 0;
  std::size_t max_running_ = 0;

  std::vector<std::unique_ptr<lane>> running_;  // engine thread only
  std::vector<std::int32_t> free_lane_slots_;   // engine thread only: snapshot and draft slots
  std::vector<sample::sample_result> scored_;   // engine thread only: a chunk's prompt logprobs
  std::vector<std::int32_t> score_scratch_;     // engine thread only: score_token's ranking
  std::vector<std::int32_t> judged_history_;    // engine thread only: history with accepted drafts
  std::array<stream_count_rounds, 16> stream_counts_;  // engine thread only: see rounds_of
  std::vector<batch_row> replay_rows_;   // engine thread only: rows of accepted tokens
  std::vector<std::size_t> draft_caps_;  // engine thread only: each lane's drafts this round
  std::size_t share_turn_ = 0;           // engine thread only: who is first past the level
  std::thread engine_;
};

}  // namespace tf::serve
