#pragma once
// Requests served at once by a lane host and read to their ends: each reply's tokens and the
// draft counts, with the host's census checked at shutdown (the draft-source tests share it).
#include <tf/serve/lane_host.hpp>
#include <tf/serve/metrics.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace tf::test {

struct served_replies {
  std::vector<std::vector<std::int32_t>> replies;
  std::uint64_t drafted = 0, accepted = 0;
};

/// Submits every request to `host` at once, reads each reply to its end, shuts the host down
/// (its census must balance) and takes the drafted and accepted counts from `m`, its metrics.
template <class Host>
served_replies serve_all(Host& host, serve::metrics const& m,
                         std::vector<serve::generation_request> const& reqs) {
  std::vector<std::shared_ptr<serve::request_stream>> streams;
  for (auto const& r : reqs) {
    auto s = host.submit(r);
    REQUIRE(s.status != serve::submit_status::rejected);
    streams.push_back(s.stream);
  }
  served_replies out;
  for (auto& s : streams) {
    auto& reply = out.replies.emplace_back();
    for (;;) {
      auto c = s->next(std::chrono::milliseconds(100));
      for (auto& t : c.tokens) reply.push_back(t.token);
      if (c.done) break;
    }
  }
  CHECK(host.shutdown(std::chrono::milliseconds(0)).balanced());
  out.drafted = m.draft_tokens.load();
  out.accepted = m.draft_accepted.load();
  return out;
}

}  // namespace tf::test
