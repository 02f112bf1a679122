#pragma once
/// The httplib::Stream a gate worker serves one request through: the request's bytes as the gate
/// buffered them, then (only for a request the gate left the body of to the reader) the socket
/// until the request's read deadline; writes wait at most the write timeout for room.
#include <tf/serve/detail/client_socket.hpp>

#include <httplib.h>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace tf::serve::detail {

/// Waits for `events` on `fd` until `deadline`; true when they came.
inline bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fd, events, 0};
    int const r = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left, 0, 60'000)));
    if (r > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
    if (r < 0 && errno != EINTR) return false;
    if (r == 0 && left <= 0) return false;
  }
}

class gate_stream final : public httplib::Stream {
 public:
  using clock = std::chrono::steady_clock;

  /// `framed`: the request ends at `end` in `buf` (reads past it see the end of the stream);
  /// otherwise reads go on from the socket until `read_deadline`.
  gate_stream(int fd, std::string& buf, std::size_t end, bool framed,
              clock::time_point read_deadline, std::chrono::milliseconds write_timeout)
      : fd_(fd),
        buf_(buf),
        end_(end),
        framed_(framed),
        read_deadline_(read_deadline),
        write_timeout_(write_timeout) {}

  bool is_readable() const override {
    return off_ < buf_.size() || (!framed_ && wait_for(fd_, POLLIN, read_deadline_));
  }
  bool is_writable() const override {
    return wait_for(fd_, POLLOUT, clock::now() + write_timeout_) && !peer_closed(fd_);
  }

  ssize_t read(char* ptr, std::size_t size) override {
    std::size_t const stop = framed_ ? end_ : buf_.size();
    if (off_ < stop) {
      auto const n = std::min(size, stop - off_);
      std::memcpy(ptr, buf_.data() + off_, n);
      off_ += n;
      return static_cast<ssize_t>(n);
    }
    if (framed_) return 0;
    for (;;) {
      if (!wait_for(fd_, POLLIN, read_deadline_)) return -1;
      auto const n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
  }

  ssize_t write(char const* ptr, std::size_t size) override {
    std::size_t sent = 0;
    while (sent < size) {
      if (!wait_for(fd_, POLLOUT, clock::now() + write_timeout_)) return sent ? ssize_t(sent) : -1;
      auto const n = ::send(fd_, ptr + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return sent ? static_cast<ssize_t>(sent) : -1;
      }
    }
    return static_cast<ssize_t>(sent);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !address_of(a, ip, port))
      port = 0;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !address_of(a, ip, port))
      port = 0;
  }
  socket_t socket() const override { return fd_; }

  /// Bytes of `buf` the request used: its framed length, or what was read of the buffer.
  std::size_t used() const { return framed_ ? std::max(off_, end_) : off_; }

 private:
  int fd_;
  std::string& buf_;
  std::size_t end_;
  bool framed_;
  std::size_t off_ = 0;
  clock::time_point read_deadline_;
  std::chrono::milliseconds write_timeout_;
};

}  // namespace tf::serve::detail
