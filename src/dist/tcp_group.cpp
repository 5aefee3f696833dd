#include "dist/tcp_group.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "core/check.h"

namespace rlm {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void set_socket_options(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

StatusOr<sockaddr_in> resolve(const HostPort& a) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(a.host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return invalid_argument(str("cannot resolve '", a.host, "': ", ::gai_strerror(rc)));
  }
  sockaddr_in sa{};
  std::memcpy(&sa, res->ai_addr, sizeof(sa));
  ::freeaddrinfo(res);
  sa.sin_port = htons(static_cast<uint16_t>(a.port));
  return sa;
}

void write_all(int fd, const void* data, size_t bytes, int peer) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw GroupError(str("tensor-parallel rank ", peer, " is gone (send: ", std::strerror(errno), ")"));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void read_all(int fd, void* data, size_t bytes, int peer) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) throw GroupError(str("tensor-parallel rank ", peer, " closed its connection (the process ended)"));
    if (n < 0) throw GroupError(str("tensor-parallel rank ", peer, " is gone (recv: ", std::strerror(errno), ")"));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace

StatusOr<HostPort> parse_host_port(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return invalid_argument(str("expected HOST:PORT, got '", text, "'"));
  }
  HostPort hp;
  hp.host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long v = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || v < 0 || v > 65535) return invalid_argument(str("bad port '", port, "' in '", text, "'"));
  hp.port = static_cast<int>(v);
  return hp;
}

StatusOr<std::unique_ptr<TcpGroup>> TcpGroup::listen(const HostPort& addr, int size) {
  RLM_CHECK(size >= 1) << "group size " << size;
  std::unique_ptr<TcpGroup> g(new TcpGroup(0, size));
  RLM_ASSIGN_OR_RETURN(sockaddr_in sa, resolve(addr));
  g->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (g->listen_fd_ < 0) return internal_error(str("socket: ", std::strerror(errno)));
  int one = 1;
  ::setsockopt(g->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(g->listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    return Status(StatusCode::kUnavailable,
                  str("tensor parallel: cannot listen on ", addr.to_string(), ": ", std::strerror(errno)));
  }
  if (::listen(g->listen_fd_, size) != 0) return internal_error(str("listen: ", std::strerror(errno)));
  socklen_t len = sizeof(sa);
  ::getsockname(g->listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  g->port_ = ntohs(sa.sin_port);
  return g;
}

Status TcpGroup::accept_peers(double timeout_s) {
  RLM_CHECK_EQ(rank_, 0);
  const auto t0 = Clock::now();
  int connected = 0;
  while (connected < size_ - 1) {
    const double left = timeout_s - seconds_since(t0);
    if (left <= 0) {
      return Status(StatusCode::kUnavailable,
                    str("tensor parallel: ", connected, " of ", size_ - 1, " other ranks connected within ",
                        timeout_s, " s"));
    }
    pollfd p{listen_fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    if (rc <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    set_socket_options(fd);
    int32_t hello[2] = {-1, -1};  // rank, size
    try {
      read_all(fd, hello, sizeof(hello), -1);
    } catch (const Error&) {
      ::close(fd);
      continue;
    }
    if (hello[1] != size_ || hello[0] <= 0 || hello[0] >= size_ || fds_[hello[0]] >= 0) {
      ::close(fd);
      return invalid_argument(str("tensor parallel: a peer said it is rank ", hello[0], " of ", hello[1],
                                  " but this group has ", size_, " ranks (or that rank already joined)"));
    }
    fds_[hello[0]] = fd;
    ++connected;
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<TcpGroup>> TcpGroup::connect(const HostPort& root, int rank, int size, double timeout_s) {
  RLM_CHECK(rank > 0 && rank < size) << "rank " << rank << " of " << size;
  std::unique_ptr<TcpGroup> g(new TcpGroup(rank, size));
  RLM_ASSIGN_OR_RETURN(sockaddr_in sa, resolve(root));
  const auto t0 = Clock::now();
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return internal_error(str("socket: ", std::strerror(errno)));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
      set_socket_options(fd);
      g->fds_[0] = fd;
      const int32_t hello[2] = {rank, size};
      write_all(fd, hello, sizeof(hello), 0);
      return g;
    }
    const int err = errno;
    ::close(fd);
    if (seconds_since(t0) > timeout_s) {
      return Status(StatusCode::kUnavailable, str("tensor parallel: rank ", rank, " cannot reach rank 0 at ",
                                                  root.to_string(), " within ", timeout_s,
                                                  " s: ", std::strerror(err)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TcpGroup::~TcpGroup() {
  for (const int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

int TcpGroup::fd_of(int peer) const {
  RLM_CHECK(peer >= 0 && peer < size_ && peer != rank_ && (rank_ == 0 || peer == 0))
      << "rank " << rank_ << " has no connection to rank " << peer;
  RLM_CHECK(fds_[peer] >= 0) << "rank " << peer << " has not joined the group";
  return fds_[peer];
}

void TcpGroup::send(int peer, const void* data, size_t bytes) { write_all(fd_of(peer), data, bytes, peer); }

void TcpGroup::recv(int peer, void* data, size_t bytes) { read_all(fd_of(peer), data, bytes, peer); }

void TcpGroup::send_message(int peer, const std::vector<uint8_t>& bytes) {
  const uint64_t n = bytes.size();
  send(peer, &n, sizeof(n));
  if (n > 0) send(peer, bytes.data(), bytes.size());
}

std::vector<uint8_t> TcpGroup::recv_message(int peer) {
  uint64_t n = 0;
  recv(peer, &n, sizeof(n));
  std::vector<uint8_t> bytes(n);
  if (n > 0) recv(peer, bytes.data(), bytes.size());
  return bytes;
}

void TcpGroup::broadcast(std::vector<uint8_t>& bytes) {
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) send_message(r, bytes);
  } else {
    bytes = recv_message(0);
  }
}

std::vector<std::vector<uint8_t>> TcpGroup::all_gather(const std::vector<uint8_t>& bytes) {
  std::vector<std::vector<uint8_t>> all(static_cast<size_t>(size_));
  if (rank_ == 0) {
    all[0] = bytes;
    for (int r = 1; r < size_; ++r) all[r] = recv_message(r);
    for (int r = 1; r < size_; ++r) {
      for (int s = 0; s < size_; ++s) send_message(r, all[s]);
    }
  } else {
    send_message(0, bytes);
    for (int s = 0; s < size_; ++s) all[s] = recv_message(0);
  }
  return all;
}

void TcpGroup::barrier() { (void)all_gather({}); }

int TcpGroup::closed_peer(int timeout_ms) const {
  std::vector<pollfd> fds;
  std::vector<int> peers;
  for (int r = 0; r < size_; ++r) {
    if (fds_[r] < 0) continue;
    fds.push_back({fds_[r], POLLRDHUP, 0});
    peers.push_back(r);
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), timeout_ms) <= 0) return -1;
  for (size_t i = 0; i < fds.size(); ++i) {
    const short ev = fds[i].revents;
    int unread = 0;
    if ((ev & (POLLHUP | POLLERR | POLLRDHUP)) != 0 && ::ioctl(fds[i].fd, FIONREAD, &unread) == 0 && unread == 0) {
      return peers[i];
    }
  }
  return -1;
}

}  // namespace rlm
