#pragma once
/// The connection gate: every accepted socket waits in one epoll thread until a whole request has
/// arrived (request_frame.hpp), and only then takes a worker thread, so idle, half-open and
/// trickling clients hold a descriptor and a small buffer, never a worker. Its limits, each with
/// a clear answer: open connections (past the cap: 503 at once), idle time before a request's
/// first byte (closed), time for a request's bytes from the first (408), header size (431),
/// requests per connection (the last is answered with Connection: close).
#include <tf/serve/detail/gate_stream.hpp>
#include <tf/serve/detail/request_frame.hpp>

#include <httplib.h>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tf::serve::detail {

/// The gate's limits (serve's flags set them; see docs/serving.md).
struct connection_limits {
  std::size_t max_connections = 64;                 // open at once; past it 503 at once
  std::size_t workers = 64;                         // requests handled at once
  std::chrono::milliseconds read_timeout{10'000};   // a request's bytes, from its first byte
  std::chrono::milliseconds idle_timeout{5'000};    // before a request's first byte (keep-alive)
  std::chrono::milliseconds write_timeout{30'000};  // a write that gets no room for this long fails
  std::size_t keep_alive_max = 100;                 // requests per connection
  std::size_t max_header_bytes = 64u << 10;         // request line and headers; past it 431
  std::size_t max_buffered_body = 256u << 10;       // larger bodies are read by the worker
  std::size_t max_refusing = 64;  // over-cap sockets kept while their 503 is read; more: closed
};

/// Whole HTTP responses the gate sends itself, without a worker.
struct gate_replies {
  std::string over_capacity;     // 503: past max_connections
  std::string request_timeout;   // 408: the request did not arrive within read_timeout
  std::string header_too_large;  // 431: past max_header_bytes
};

/// What the gate has counted since it started.
struct gate_counts {
  std::uint64_t accepted = 0, refused = 0, requests = 0, idle_closed = 0, timed_out = 0,
                too_large = 0, open = 0, peak_open = 0;
};

/// Raises this process's open-file limit to its hard limit and returns `wanted`, or fewer when
/// the limit cannot hold that many connections and 256 more descriptors (a note says so).
inline std::size_t connections_within_fd_limit(std::size_t wanted,
                                               std::vector<std::string>& notes) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return wanted;
  if (r.rlim_cur < r.rlim_max) {
    auto const raised = rlimit{r.rlim_max, r.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) r = raised;
  }
  auto const room = r.rlim_cur > 512 ? static_cast<std::size_t>(r.rlim_cur - 256) : 256;
  if (wanted <= room) return wanted;
  notes.push_back(
      fmt::format("--max-connections {} lowered to {}: the open-file limit is {} (ulimit -n)",
                  wanted, room, static_cast<unsigned long long>(r.rlim_cur)));
  return room;
}

inline std::string limits_line(connection_limits const& l) {
  return fmt::format(
      "at most {} open (past it 503), {} requests at once, idle {} s, a request's bytes within "
      "{} s, writes {} s, {} requests per connection",
      l.max_connections, l.workers, l.idle_timeout.count() / 1000, l.read_timeout.count() / 1000,
      l.write_timeout.count() / 1000, l.keep_alive_max);
}

inline std::string counts_line(gate_counts const& c) {
  return fmt::format(
      "accepted {}, requests {}, refused over the cap {}, idle closed {}, timed out (408) {}, "
      "headers too large {}, peak open {}, open {}",
      c.accepted, c.requests, c.refused, c.idle_closed, c.timed_out, c.too_large, c.peak_open,
      c.open);
}

class connection_gate {
 public:
  using clock = std::chrono::steady_clock;
  /// Serves one request from the stream: httplib's process_request.
  using serve_fn = std::function<bool(httplib::Stream&, bool close_connection, bool& closed)>;

  connection_gate(connection_limits lim, gate_replies replies, serve_fn serve,
                  std::function<void()> on_refused)
      : lim_(lim),
        replies_(std::move(replies)),
        serve_(std::move(serve)),
        on_refused_(std::move(on_refused)) {
    lim_.max_connections = std::max<std::size_t>(lim_.max_connections, 1);
    lim_.workers = std::max<std::size_t>(lim_.workers, 1);
    lim_.keep_alive_max = std::max<std::size_t>(lim_.keep_alive_max, 1);
  }
  connection_gate(connection_gate const&) = delete;
  connection_gate& operator=(connection_gate const&) = delete;
  ~connection_gate() { stop(); }

  connection_limits const& limits() const { return lim_; }

  /// Starts the epoll thread and the workers (once).
  void start() {
    std::lock_guard lk(start_mu_);
    if (started_) return;
    started_ = true;
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // the wake-up descriptor
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
    reactor_ = std::thread([this] { run_reactor(); });
    for (std::size_t i = 0; i < lim_.workers; ++i) workers_.emplace_back([this] { run_worker(); });
  }

  /// Stops taking connections, closes the waiting ones, and joins the threads once the requests
  /// being served have finished.
  void stop() {
    {
      std::lock_guard lk(start_mu_);
      if (!started_ || stopped_) return;
      stopped_ = true;
    }
    stopping_ = true;
    wake();
    {
      std::lock_guard lk(work_mu_);
      work_cv_.notify_all();
    }
    reactor_.join();
    for (auto& t : workers_) t.join();
    std::lock_guard lk(inbox_mu_);
    for (auto& c : inbox_) close_conn(*c);
    inbox_.clear();
    ::close(epoll_);
    ::close(wake_);
  }

  /// Takes an accepted socket (the accept thread calls this; it never blocks).
  void admit(int fd) {
    if (stopping_ || !started_) {
      ::close(fd);
      return;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    accepted_++;
    auto c = std::make_unique<conn>();
    c->fd = fd;
    if (open_.load() >= lim_.max_connections) {
      refused_++;
      if (on_refused_) on_refused_();
      if (refusing_.load() >= lim_.max_refusing) {
        ::close(fd);
        return;
      }
      refusing_++;
      c->counted = false;
      answer_and_drain(*c, replies_.over_capacity);
    } else {
      auto const n = ++open_;
      for (auto p = peak_.load(); n > p && !peak_.compare_exchange_weak(p, n);) {
      }
      c->deadline = clock::now() + lim_.idle_timeout;
    }
    to_reactor(std::move(c));
  }

  gate_counts counts() const {
    gate_counts g;
    g.accepted = accepted_;
    g.refused = refused_;
    g.requests = requests_;
    g.idle_closed = idle_closed_;
    g.timed_out = timed_out_;
    g.too_large = too_large_;
    g.open = open_;
    g.peak_open = peak_;
    return g;
  }

 private:
  struct conn {
    int fd = -1;
    std::string buf;
    clock::time_point deadline;
    bool started = false;   // bytes of the next request have arrived
    bool draining = false;  // answered; reading what the client still sends, then closing
    bool counted = true;    // in open_ (else in refusing_)
    std::size_t served = 0;
    frame framed;
  };

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto r = ::write(wake_, &one, sizeof one);
  }

  void to_reactor(std::unique_ptr<conn> c) {
    {
      std::lock_guard lk(inbox_mu_);
      inbox_.push_back(std::move(c));
    }
    wake();
  }

  void close_conn(conn& c) {
    if (c.fd < 0) return;
    ::close(c.fd);
    c.fd = -1;
    (c.counted ? open_ : refusing_)--;
  }

  // Sends a whole answer, stops writing and reads what the client still sends for up to a second,
  // so closing does not reset the connection under the answer before the client reads it.
  void answer_and_drain(conn& c, std::string const& reply) {
    [[maybe_unused]] auto n = ::send(c.fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    ::shutdown(c.fd, SHUT_WR);
    c.draining = true;
    c.buf.clear();
    c.buf.shrink_to_fit();
    c.deadline = clock::now() + std::chrono::seconds(1);
  }

  void run_reactor() {
    std::unordered_map<int, std::unique_ptr<conn>> waiting;
    auto next_scan = clock::time_point::max();
    std::vector<epoll_event> events(256);
    auto drop = [&](conn& c) {
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
      int const fd = c.fd;
      close_conn(c);
      waiting.erase(fd);
    };
    // Reads what has arrived; hands a whole request to the workers. False when `c` was dropped
    // or handed on.
    auto pump = [&](conn& c) -> bool {
      if (c.draining) {
        char sink[4096];
        for (;;) {
          auto const n = ::recv(c.fd, sink, sizeof sink, 0);
          if (n > 0) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
          drop(c);
          return false;
        }
      }
      std::size_t const cap = lim_.max_header_bytes + 4 + lim_.max_buffered_body + 1;
      bool eof = false;
      while (c.buf.size() < cap) {
        char chunk[16384];
        auto const want = std::min(sizeof chunk, cap - c.buf.size());
        auto const n = ::recv(c.fd, chunk, want, 0);
        if (n > 0) {
          if (!c.started) {
            c.started = true;
            c.deadline = clock::now() + lim_.read_timeout;
            next_scan = std::min(next_scan, c.deadline);
          }
          c.buf.append(chunk, static_cast<std::size_t>(n));
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        eof = true;
        break;
      }
      if (!c.buf.empty()) {
        c.framed = frame_request(c.buf, lim_.max_header_bytes, lim_.max_buffered_body);
        if (c.framed.state == frame_state::too_large) {
          too_large_++;
          answer_and_drain(c, replies_.header_too_large);
          if (!eof) return true;
          drop(c);
          return false;
        }
        if (c.framed.state != frame_state::incomplete) {
          ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.fd, nullptr);
          auto it = waiting.find(c.fd);
          auto owned = std::move(it->second);
          waiting.erase(it);
          to_workers(std::move(owned));
          return false;
        }
      }
      if (eof) drop(c);
      return !eof;
    };
    auto enroll = [&](std::unique_ptr<conn> c) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.ptr = c.get();
      ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->fd, &ev);
      next_scan = std::min(next_scan, c->deadline);
      auto& ref = *c;
      waiting.emplace(c->fd, std::move(c));
      // Bytes already here (a pipelined request): frame them now.
      if (!ref.buf.empty()) pump(ref);
    };
    while (!stopping_) {
      auto const now = clock::now();
      int timeout_ms = 1000;
      if (next_scan != clock::time_point::max())
        timeout_ms = static_cast<int>(std::clamp<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(next_scan - now).count() + 1, 0,
            1000));
      int const n =
          ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), timeout_ms);
      for (int i = 0; i < n; ++i) {
        if (events[static_cast<std::size_t>(i)].data.ptr == nullptr) {
          std::uint64_t v;
          [[maybe_unused]] auto r = ::read(wake_, &v, sizeof v);
          continue;
        }
        // Only a connection's own event drops or hands it on, so every pointer here is live.
        pump(*static_cast<conn*>(events[static_cast<std::size_t>(i)].data.ptr));
      }
      std::vector<std::unique_ptr<conn>> arrived;
      {
        std::lock_guard lk(inbox_mu_);
        arrived.swap(inbox_);
      }
      for (auto& c : arrived) enroll(std::move(c));
      if (clock::now() >= next_scan) {
        auto const t = clock::now();
        next_scan = clock::time_point::max();
        std::vector<conn*> expired;
        for (auto& [fd, c] : waiting) {
          if (c->deadline <= t)
            expired.push_back(c.get());
          else
            next_scan = std::min(next_scan, c->deadline);
        }
        for (auto* c : expired) {
          if (c->draining) {
            drop(*c);
          } else if (!c->started) {
            idle_closed_++;
            drop(*c);
          } else {
            timed_out_++;
            answer_and_drain(*c, replies_.request_timeout);
            next_scan = std::min(next_scan, c->deadline);
          }
        }
      }
    }
    for (auto& [fd, c] : waiting) close_conn(*c);
  }

  void to_workers(std::unique_ptr<conn> c) {
    {
      std::lock_guard lk(work_mu_);
      ready_.push_back(std::move(c));
    }
    work_cv_.notify_one();
  }

  void run_worker() {
    for (;;) {
      std::unique_ptr<conn> c;
      {
        std::unique_lock lk(work_mu_);
        work_cv_.wait(lk, [&] { return stopping_ || !ready_.empty(); });
        if (ready_.empty()) return;
        c = std::move(ready_.front());
        ready_.pop_front();
      }
      if (stopping_) {
        close_conn(*c);
        continue;
      }
      bool const framed = c->framed.state == frame_state::complete;
      // A body left to the worker may go unread (a refusal before it), so that connection ends
      // too; the reply says so (Connection: close), or a client reusing it would race the close.
      bool const last = c->served + 1 >= lim_.keep_alive_max || !framed || stopping_;
      bool closed = false, ok = false;
      std::size_t used = 0;
      {
        gate_stream s(c->fd, c->buf, c->framed.end, framed, c->deadline, lim_.write_timeout);
        try {
          ok = serve_(s, last, closed);
        } catch (...) {
          ok = false;
        }
        used = s.used();
      }
      requests_++;
      c->served++;
      if (!ok || closed || last || stopping_) {
        close_conn(*c);
        continue;
      }
      c->buf.erase(0, std::min(used, c->buf.size()));
      c->started = !c->buf.empty();
      c->deadline = clock::now() + (c->started ? lim_.read_timeout : lim_.idle_timeout);
      if (c->buf.capacity() > (64u << 10)) c->buf.shrink_to_fit();
      to_reactor(std::move(c));
    }
  }

  connection_limits lim_;
  gate_replies replies_;
  serve_fn serve_;
  std::function<void()> on_refused_;

  std::mutex start_mu_;
  bool started_ = false, stopped_ = false;
  std::atomic<bool> stopping_{false};
  int epoll_ = -1, wake_ = -1;
  std::thread reactor_;
  std::vector<std::thread> workers_;

  std::mutex inbox_mu_;
  std::vector<std::unique_ptr<conn>> inbox_;
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<std::unique_ptr<conn>> ready_;

  std::atomic<std::size_t> open_{0}, refusing_{0}, peak_{0};
  std::atomic<std::uint64_t> accepted_{0}, refused_{0}, requests_{0}, idle_closed_{0},
      timed_out_{0}, too_large_{0};
};

}  // namespace tf::serve::detail
