// Tensor-parallel groups inside one test process: every rank a thread with its own TcpGroup and
// CpuCommunicator over loopback TCP (the same code the rank processes run).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "dist/cpu_communicator.h"
#include "dist/tcp_group.h"

namespace rlm::testing {

// The groups of `size` ranks connected to each other (index = rank).
inline std::vector<std::unique_ptr<TcpGroup>> connect_group(int size) {
  std::vector<std::unique_ptr<TcpGroup>> groups(static_cast<size_t>(size));
  auto root = TcpGroup::listen(HostPort{}, size);
  EXPECT_TRUE(root.is_ok()) << root.status().to_string();
  if (!root.is_ok()) return {};
  HostPort addr;
  addr.port = (*root)->port();
  std::vector<std::thread> joiners;
  for (int r = 1; r < size; ++r) {
    joiners.emplace_back([&, r] {
      auto g = TcpGroup::connect(addr, r, size, 10.0);
      EXPECT_TRUE(g.is_ok()) << g.status().to_string();
      if (g.is_ok()) groups[r] = std::move(g).value();
    });
  }
  const Status st = (*root)->accept_peers(10.0);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  groups[0] = std::move(root).value();
  for (std::thread& t : joiners) t.join();
  return groups;
}

// Runs fn(rank, communicator) on every rank of a fresh group, one thread each.
inline void run_ranks(int size, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::unique_ptr<TcpGroup>> groups = connect_group(size);
  ASSERT_EQ(groups.size(), static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      CpuCommunicator comm(*groups[r]);
      fn(r, comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace rlm::testing
