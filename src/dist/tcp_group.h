// TcpGroup: the control plane of a tensor-parallel group — one TCP connection from every rank to
// rank 0 (a star), carrying length-prefixed byte messages. It bootstraps the group (the NCCL unique
// id, the engine settings), carries rank 0's step stream, and is the CPU communicator's transport.
// A peer that dies closes its socket: the blocked send/recv on the other side throws rlm::Error
// naming the rank, so a dead rank ends the group with an error, never a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/status.h"

namespace rlm {

// A collective or a step message failed because a rank is gone: the group cannot go on.
class GroupError : public Error {
 public:
  using Error::Error;
};

// "HOST:PORT" (an IPv4 address or a resolvable name; PORT 0: any free port, rank 0 only).
struct HostPort {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};
StatusOr<HostPort> parse_host_port(const std::string& text);

class TcpGroup {
 public:
  // Rank 0: listens on `addr` (bound before any peer starts, so port 0 picks a free one: port()).
  static StatusOr<std::unique_ptr<TcpGroup>> listen(const HostPort& addr, int size);
  // Rank 0: waits for the size - 1 other ranks to connect (each says its rank); kUnavailable after
  // timeout_s seconds without all of them.
  Status accept_peers(double timeout_s);
  // Ranks 1..size-1: connects to rank 0, retrying until timeout_s (rank 0 may start later on
  // another node).
  static StatusOr<std::unique_ptr<TcpGroup>> connect(const HostPort& root, int rank, int size, double timeout_s);
  ~TcpGroup();
  TcpGroup(const TcpGroup&) = delete;
  TcpGroup& operator=(const TcpGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int port() const { return port_; }  // rank 0: the port it listens on

  // Point-to-point between rank 0 and `peer` (rank 0 names any peer; the others only 0). Throw
  // rlm::Error when the connection is closed or fails.
  void send(int peer, const void* data, size_t bytes);
  void recv(int peer, void* data, size_t bytes);
  // Length-prefixed messages.
  void send_message(int peer, const std::vector<uint8_t>& bytes);
  std::vector<uint8_t> recv_message(int peer);

  // Rank 0's `bytes` to every rank (in place; the others' input is ignored).
  void broadcast(std::vector<uint8_t>& bytes);
  // Every rank's `bytes` to every rank, in rank order.
  std::vector<std::vector<uint8_t>> all_gather(const std::vector<uint8_t>& bytes);
  void barrier();
  // Waits up to timeout_ms for a connection to close without unread data; returns its peer's
  // rank, or -1. Reads nothing (a watchdog thread may call it while another thread receives).
  int closed_peer(int timeout_ms) const;

 private:
  TcpGroup(int rank, int size) : rank_(rank), size_(size), fds_(static_cast<size_t>(size), -1) {}
  int fd_of(int peer) const;

  int rank_ = 0;
  int size_ = 1;
  int port_ = 0;
  int listen_fd_ = -1;
  std::vector<int> fds_;  // [size] rank 0: one socket per peer; others: fds_[0] to rank 0
};

}  // namespace rlm
