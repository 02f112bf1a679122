#pragma once
/// What the forward tests share: a transformers oracle fixture (expected.json + logits.bin), one
/// stream over a CPU forward, and the comparisons the tests make against the oracle.
#include <tf/batch.hpp>
#include <tf/error.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace tf::test {

/// A fixture folder's transformers reference: prompts, their fp32 logits and greedy tokens.
struct hf_oracle {
  int vocab = 0;
  std::vector<std::vector<std::int32_t>> prompts, greedy;
  std::vector<std::vector<float>> logits;  // per prompt [T, vocab]
  nlohmann::json entries;                  // expected.json's "prompts", for family extras
};

/// Reads `dir`/expected.json and `dir`/logits.bin (each prompt's [T, vocab] f32, in order).
inline hf_oracle read_hf_oracle(std::string const& dir) {
  hf_oracle r;
  std::ifstream js(dir + "/expected.json");
  REQUIRE(js.good());
  auto j = nlohmann::json::parse(js);
  r.vocab = j.at("vocab_size").get<int>();
  r.entries = j.at("prompts");
  std::ifstream bin(dir + "/logits.bin", std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  std::size_t off = 0;
  for (auto const& p : r.entries) {
    r.prompts.push_back(p.at("prompt").get<std::vector<std::int32_t>>());
    r.greedy.push_back(p.at("greedy").get<std::vector<std::int32_t>>());
    std::vector<float> l(r.prompts.back().size() * static_cast<std::size_t>(r.vocab));
    REQUIRE(off + l.size() * 4 <= raw.size());
    std::memcpy(l.data(), raw.data() + off, l.size() * 4);
    off += l.size() * 4;
    r.logits.push_back(std::move(l));
  }
  REQUIRE(off == raw.size());
  return r;
}

/// The oracle of fixture folder `dir`, read once per test executable.
inline hf_oracle const& hf_oracle_at(std::string const& dir) {
  static std::map<std::string, hf_oracle> cache;
  auto it = cache.find(dir);
  if (it == cache.end()) it = cache.emplace(dir, read_hf_oracle(dir)).first;
  return it->second;
}

inline float max_abs_diff(std::span<float const> a, std::span<float const> b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

inline std::int32_t argmax(std::span<float const> l) {
  return static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

/// The last `vocab` logits of `all`: the last position's row.
inline std::span<float const> last_row(std::span<float const> all, int vocab) {
  return all.subspan(all.size() - static_cast<std::size_t>(vocab));
}

/// `n` greedy tokens from the logits `last`; `feed(token)` appends a token and returns the
/// logits after it.
template <class Feed>
std::vector<std::int32_t> greedy_tokens(std::span<float const> last, std::size_t n, Feed&& feed) {
  std::vector<std::int32_t> got;
  std::vector<float> cur(last.begin(), last.end());
  for (std::size_t i = 0; i < n; ++i) {
    auto t = argmax(cur);
    got.push_back(t);
    auto const next = feed(t);
    cur.assign(next.begin(), next.end());
  }
  return got;
}

/// How close a model comes to the oracle over every prompt position: the largest logit
/// difference, and at how many of the positions the top-1 token agrees.
struct oracle_fit {
  float worst = 0;
  int agree = 0, total = 0;

  friend std::ostream& operator<<(std::ostream& os, oracle_fit const& f) {
    return os << "max |tf - transformers| = " << f.worst << ", top-1 agrees at " << f.agree << "/"
              << f.total;
  }
};

/// `logits_of(p)` gives the logits [T, vocab] of every position of prompt p.
template <class LogitsOf>
oracle_fit fit_to(hf_oracle const& o, LogitsOf&& logits_of) {
  oracle_fit f;
  auto const V = static_cast<std::size_t>(o.vocab);
  for (std::size_t p = 0; p < o.prompts.size(); ++p) {
    auto const all = logits_of(p);
    std::span<float const> const got(all), ref(o.logits[p]);
    f.worst = std::max(f.worst, max_abs_diff(got, ref));
    for (std::size_t t = 0; t < o.prompts[p].size(); ++t) {
      f.agree += argmax(got.subspan(t * V, V)) == argmax(ref.subspan(t * V, V));
      ++f.total;
    }
  }
  return f;
}

/// Page ids 0..n-1, in order.
inline std::vector<std::int32_t> pages_in_order(int n) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

/// Page ids n-1..0, so that page order matters.
inline std::vector<std::int32_t> pages_reversed(int n) {
  std::vector<std::int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(n - 1 - i);
  return p;
}

/// One stream over an engine (with its own page table and, where the engine keeps recurrent
/// state, its state slot): token chunks at the stream's position, logits for the last token or,
/// with `all`, for every token.
template <class Forward>
struct stream {
  Forward& fwd;
  std::vector<std::int32_t> pages;
  std::int32_t slot = -1;
  std::int32_t pos = 0;

  stream(Forward& f, std::vector<std::int32_t> p, std::int32_t s = -1)
      : fwd(f), pages(std::move(p)), slot(s) {}
  /// Every page in order, and slot 0 where the engine has state slots.
  explicit stream(Forward& f) : stream(f, pages_in_order(f.kv().num_pages), first_slot(f)) {}

  /// The row for `toks` at the stream's position (the stream moves on past them).
  tf::batch_row row(std::span<std::int32_t const> toks, bool all) {
    tf::batch_row r{toks, pos, pages, all, slot};
    pos += static_cast<std::int32_t>(toks.size());
    return r;
  }

  std::vector<float> feed(std::span<std::int32_t const> toks, bool all) {
    auto const r = row(toks, all);
    std::vector<float> out(static_cast<std::size_t>(tf::logits_rows({&r, 1}) * fwd.vocab_size()));
    fwd.forward({&r, 1}, out.data());
    return out;
  }

  /// The last logits of `toks` fed in chunks of `chunk`.
  std::vector<float> feed_chunks(std::span<std::int32_t const> toks, std::size_t chunk) {
    std::vector<float> last;
    for (std::size_t i = 0; i < toks.size(); i += chunk)
      last = feed(toks.subspan(i, std::min(chunk, toks.size() - i)), false);
    return last;
  }

  /// The last logits after feeding `prompt` in chunks of `chunk` from position 0.
  std::vector<float> prefill(std::span<std::int32_t const> prompt, std::size_t chunk) {
    pos = 0;
    return feed_chunks(prompt, chunk);
  }

  /// `n` greedy tokens after `logits`, the logits `feed` returned last.
  std::vector<std::int32_t> greedy(std::span<float const> logits, std::size_t n) {
    auto const vocab = static_cast<int>(fwd.vocab_size());
    return greedy_tokens(last_row(logits, vocab), n, [this](std::int32_t t) {
      return feed({&t, 1}, false);
    });
  }

 private:
  static std::int32_t first_slot(Forward& f) {
    if constexpr (requires { f.num_state_slots(); })
      return f.num_state_slots() > 0 ? 0 : -1;
    else
      return -1;
  }
};

/// A row's logits do not depend on the batch, the chunking or the thread count: on `fwd` (48
/// pages or more), prompt 0 whole, prompt 1 token by token and prompt 2 in two chunks, in one
/// batch with interleaved page ids, give `solo[p]`, the last logits of prompt p run alone.
template <class Forward>
void check_batch_independent(Forward& fwd, std::vector<std::vector<std::int32_t>> const& prompts,
                             std::vector<std::vector<float>> const& solo, std::int64_t V) {
  using tf::batch_row;
  std::vector<std::vector<std::int32_t>> tables(3);
  for (int i = 0; i < 16; ++i)
    for (int s = 0; s < 3; ++s) tables[static_cast<std::size_t>(s)].push_back(i * 3 + s);
  auto const& p0 = prompts[0];
  auto const& p1 = prompts[1];
  auto const& p2 = prompts[2];
  std::size_t const half = p2.size() / 2;
  std::vector<batch_row> rows{{p0, 0, tables[0], false},
                              {std::span(p1).first(1), 0, tables[1], false},
                              {std::span(p2).first(half), 0, tables[2], false}};
  std::vector<float> out(3 * static_cast<std::size_t>(V));
  fwd.forward(rows, out.data());
  CHECK(std::equal(out.begin(), out.begin() + V, solo[0].begin()));
  for (std::size_t i = 1; i < p1.size(); ++i) {
    std::vector<batch_row> r2{
        {std::span(p1).subspan(i, 1), static_cast<std::int32_t>(i), tables[1], false}};
    if (i == 1)
      r2.push_back({std::span(p2).subspan(half), static_cast<std::int32_t>(half), tables[2], true});
    std::vector<float> o2(static_cast<std::size_t>(tf::logits_rows(r2) * V));
    fwd.forward(r2, o2.data());
    if (i == 1) {
      auto tail = std::span<float const>(o2).subspan(o2.size() - static_cast<std::size_t>(V));
      INFO("prompt 2 in two chunks");
      CHECK(std::equal(tail.begin(), tail.end(), solo[2].begin()));
    }
    if (i + 1 == p1.size()) {
      INFO("prompt 1 token by token");
      CHECK(std::equal(o2.begin(), o2.begin() + V, solo[1].begin()));
    }
  }
}

/// An empty batch, a row past the KV storage, a page id outside it and a token outside the
/// vocabulary each throw tf::error from `fwd` (4 pages of 4 tokens or fewer).
template <class Forward>
void check_bad_batches_throw(Forward& fwd) {
  using tf::batch_row;
  auto const V = fwd.vocab_size();
  std::vector<float> out(static_cast<std::size_t>(V) * 2);
  std::vector<std::int32_t> toks{1, 2, 3}, pages{0}, pages2{0, 9};
  std::vector<std::int32_t> bad_tok{static_cast<std::int32_t>(V)};
  std::vector<batch_row> none;
  CHECK_THROWS_AS(fwd.forward(none, out.data()), tf::error);
  batch_row too_far{toks, 3, pages};
  CHECK_THROWS_AS(fwd.forward({&too_far, 1}, out.data()), tf::error);
  batch_row bad_page{toks, 3, pages2};
  CHECK_THROWS_AS(fwd.forward({&bad_page, 1}, out.data()), tf::error);
  batch_row vocab{bad_tok, 0, pages};
  CHECK_THROWS_AS(fwd.forward({&vocab, 1}, out.data()), tf::error);
}

}  // namespace tf::test
