#pragma once
/// Whether the client of a request still listens, without writing to it: the request's socket is
/// found by its addresses (httplib 0.11 hands a handler no socket) and polled with a peek.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace tf::serve::detail {

// The numeric address and port of a socket address (IPv4 or IPv6).
inline bool address_of(sockaddr_storage const& a, std::string& host, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    auto const& v4 = reinterpret_cast<sockaddr_in const&>(a);
    if (!::inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf)) return false;
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto const& v6 = reinterpret_cast<sockaddr_in6 const&>(a);
    if (!::inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(v6.sin6_port);
  } else {
    return false;
  }
  host = buf;
  return true;
}

/// The descriptor of this process's connected socket from `remote_addr:remote_port` to local
/// port `local_port`, or -1. A TCP connection is named by its addresses, so at most one matches;
/// the worker serving the request holds it open until the handler returns.
inline int find_client_socket(std::string const& remote_addr, int remote_port, int local_port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int const fd = std::atoi(e->d_name);
    sockaddr_storage peer{}, self{};
    socklen_t plen = sizeof peer, slen = sizeof self;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &slen) != 0) continue;
    std::string phost, shost;
    int pport = 0, sport = 0;
    if (!address_of(peer, phost, pport) || !address_of(self, shost, sport)) continue;
    if (pport == remote_port && sport == local_port && phost == remote_addr) {
      found = fd;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

/// True when the peer of `fd` has closed (end of stream, reset or error); bytes it sent ahead (a
/// pipelined request) are left unread.
inline bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (p.revents & (POLLIN | POLLRDHUP)) {
    char c = 0;
    auto const n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

}  // namespace tf::serve::detail
