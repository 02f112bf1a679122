#pragma once
/// Server metrics in Prometheus text form: counters, gauges and latency histograms.
#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tf::serve {

/// A cumulative histogram over fixed upper bounds (seconds), as Prometheus expects.
class histogram {
 public:
  explicit histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

  /// Records one observation.
  void observe(double v) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < bounds_.size(); ++i)
      if (v <= bounds_[i]) ++counts_[i];
    ++count_;
    sum_ += v;
  }

  /// Observations so far.
  std::uint64_t count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }

  /// Appends `name_bucket`, `name_sum` and `name_count` lines; `labels` (e.g.
  /// `model_name="x"`) go on every line.
  void write(std::string& out, std::string const& name, std::string const& help,
             std::string const& labels = {}) const {
    std::lock_guard lock(mutex_);
    auto const more = labels.empty() ? std::string() : "," + labels;
    auto const own = labels.empty() ? std::string() : "{" + labels + "}";
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    for (std::size_t i = 0; i < bounds_.size(); ++i)
      out += fmt::format("{}_bucket{{le=\"{}\"{}}} {}\n", name, bounds_[i], more, counts_[i]);
    out += fmt::format("{}_bucket{{le=\"+Inf\"{}}} {}\n{}_sum{} {}\n{}_count{} {}\n", name, more,
                       count_, name, own, sum_, name, own, count_);
  }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  double sum_ = 0.0;
  mutable std::mutex mutex_;
};

/// Latency bounds from 1 ms to 60 s.
inline std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

/// A snapshot of the lane host for /v1/load and the /metrics gauges.
struct load_snapshot {
  std::size_t running = 0, queued = 0, requeued = 0;
  std::size_t pages_free = 0, pages_held = 0, pages_promised = 0, pages_store = 0, pages_total = 0;
  std::size_t lanes = 0, lanes_free = 0;  // streams at once (--parallel), and those idle
  // Recurrent-state slots of a pool with them (kept prompt states hold some); 0 for the others.
  std::size_t state_slots_free = 0, state_slots_held = 0, state_slots_total = 0;
  std::size_t max_running_seen = 0;
  std::uint64_t rounds = 0;
};

/// Every counter the server exports; the lane host and the HTTP layer update it.
struct metrics {
  std::atomic<std::uint64_t> prompt_tokens{0};
  std::atomic<std::uint64_t> prompt_tokens_reused{0};  // skipped: their KV came from the store
  std::atomic<std::uint64_t> prefix_cache_hits{0};     // requests that reused a kept prefix
  std::atomic<std::uint64_t> generation_tokens{0};
  std::atomic<std::uint64_t> requests_finished{0};
  std::atomic<std::uint64_t> rejected_queue_full{0};
  std::atomic<std::uint64_t> rejected_larger_than_pool{0};
  std::atomic<std::uint64_t> rejected_context{0};
  std::atomic<std::uint64_t> rejected_bad_request{0};
  std::atomic<std::uint64_t> rejected_auth{0};
  std::atomic<std::uint64_t> rejected_connections{0};
  std::atomic<std::uint64_t> cancelled{0};
  // Speculative decoding: verify rows run, tokens drafted, drafts accepted; the source's name.
  std::atomic<std::uint64_t> draft_rows{0};
  std::atomic<std::uint64_t> draft_tokens{0};
  std::atomic<std::uint64_t> draft_accepted{0};
  std::string draft_source = "none";  // set once, before the lane host's thread starts
  histogram ttft{latency_bounds()};
  histogram inter_token{latency_bounds()};

  /// Prometheus text; the gauges (running, waiting, KV use) come from the lane host's snapshot.
  /// vLLM's names for the same numbers follow tf's, labelled model_name="`model_name`", so
  /// dashboards built for vLLM read tf unchanged.
  std::string prometheus(load_snapshot const& l, std::string const& model_name = "tf") const {
    auto const running = l.running, waiting = l.queued, pages_held = l.pages_held,
               pages_total = l.pages_total;
    std::string out;
    auto gauge = [&](char const* name, char const* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
    };
    auto counter = [&](char const* name, char const* help, std::uint64_t v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
    };
    gauge("tf_requests_running", "Requests in the lane rounds now.", static_cast<double>(running));
    gauge("tf_requests_waiting", "Requests queued for admission.", static_cast<double>(waiting));
    gauge("tf_kv_pages_held", "KV pages holding tokens.", static_cast<double>(pages_held));
    gauge("tf_kv_pages_total", "KV pages in the pool.", static_cast<double>(pages_total));
    gauge("tf_kv_usage_ratio", "Held share of the KV pool.",
          pages_total ? static_cast<double>(pages_held) / static_cast<double>(pages_total) : 0.0);
    gauge("tf_lanes_total", "Streams the lane rounds run at once.", static_cast<double>(l.lanes));
    gauge("tf_state_slots_held", "Recurrent-state slots held (streams and kept prompts).",
          static_cast<double>(l.state_slots_held));
    gauge("tf_state_slots_total", "Recurrent-state slots in the pool.",
          static_cast<double>(l.state_slots_total));
    counter("tf_prompt_tokens_total", "Prompt tokens processed.", prompt_tokens.load());
    counter("tf_prompt_tokens_reused_total", "Prompt tokens skipped: kept in the prompt store.",
            prompt_tokens_reused.load());
    counter("tf_prefix_cache_hits_total", "Requests that started from a kept prefix.",
            prefix_cache_hits.load());
    gauge("tf_kv_pages_kept", "KV pages only kept sequences hold (reclaimable).",
          static_cast<double>(l.pages_store));
    counter("tf_generation_tokens_total", "Tokens generated.", generation_tokens.load());
    counter("tf_requests_finished_total", "Requests that finished.", requests_finished.load());
    counter("tf_requests_cancelled_total", "Requests cancelled (client gone or stop).",
            cancelled.load());
    out +=
        "# HELP tf_requests_rejected_total Requests refused, by reason.\n"
        "# TYPE tf_requests_rejected_total counter\n";
    out += fmt::format("tf_requests_rejected_total{{reason=\"queue_full\"}} {}\n",
                       rejected_queue_full.load());
    out += fmt::format("tf_requests_rejected_total{{reason=\"larger_than_pool\"}} {}\n",
                       rejected_larger_than_pool.load());
    out += fmt::format("tf_requests_rejected_total{{reason=\"context_length_exceeded\"}} {}\n",
                       rejected_context.load());
    out += fmt::format("tf_requests_rejected_total{{reason=\"bad_request\"}} {}\n",
                       rejected_bad_request.load());
    out += fmt::format("tf_requests_rejected_total{{reason=\"unauthorized\"}} {}\n",
                       rejected_auth.load());
    out += fmt::format("tf_requests_rejected_total{{reason=\"too_many_connections\"}} {}\n",
                       rejected_connections.load());
    auto const source = fmt::format("source=\"{}\"", label_value(draft_source));
    out += fmt::format(
        "# HELP tf_draft_tokens_total Tokens drafted for speculative decoding, by source.\n"
        "# TYPE tf_draft_tokens_total counter\ntf_draft_tokens_total{{{}}} {}\n"
        "# HELP tf_draft_accepted_tokens_total Drafted tokens the target accepted, by source.\n"
        "# TYPE tf_draft_accepted_tokens_total counter\ntf_draft_accepted_tokens_total{{{}}} {}\n",
        source, draft_tokens.load(), source, draft_accepted.load());
    ttft.write(out, "tf_time_to_first_token_seconds", "Time from arrival to the first token.");
    inter_token.write(out, "tf_inter_token_seconds", "Time between two tokens of one request.");
    vllm_names(out, l, model_name);
    return out;
  }

  /// Prometheus label value: backslash, quote and newline escaped.
  static std::string label_value(std::string const& v) {
    std::string out;
    for (char c : v) {
      if (c == '\\' || c == '"')
        out += {'\\', c};
      else if (c == '\n')
        out += "\\n";
      else
        out += c;
    }
    return out;
  }

 private:
  // vLLM's metric names (V1, and V0's gpu_cache_usage_perc) for the numbers tf already counts.
  void vllm_names(std::string& out, load_snapshot const& l, std::string const& model_name) const {
    auto const label = fmt::format("model_name=\"{}\"", label_value(model_name));
    auto one = [&](char const* name, char const* type, char const* help, double v) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name,
                         label, v);
    };
    double const usage =
        l.pages_total ? static_cast<double>(l.pages_held) / static_cast<double>(l.pages_total)
                      : 0.0;
    one("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
        static_cast<double>(l.running));
    one("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
        static_cast<double>(l.queued));
    one("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage);
    one("vllm:gpu_cache_usage_perc", "gauge",
        "KV-cache usage (vLLM V0's name). 1 means 100 percent usage.", usage);
    one("vllm:prompt_tokens_total", "counter",
        "Number of prefill tokens processed (run and reused).",
        static_cast<double>(prompt_tokens.load() + prompt_tokens_reused.load()));
    one("vllm:prefix_cache_queries_total", "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        static_cast<double>(prompt_tokens.load() + prompt_tokens_reused.load()));
    one("vllm:prefix_cache_hits_total", "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        static_cast<double>(prompt_tokens_reused.load()));
    one("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
        static_cast<double>(generation_tokens.load()));
    one("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
        static_cast<double>(draft_rows.load()));
    one("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
        static_cast<double>(draft_tokens.load()));
    one("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
        static_cast<double>(draft_accepted.load()));
    ttft.write(out, "vllm:time_to_first_token_seconds",
               "Histogram of time to first token in seconds.", label);
    inter_token.write(out, "vllm:inter_token_latency_seconds",
                      "Histogram of inter-token latency in seconds.", label);
  }
};

}  // namespace tf::serve
