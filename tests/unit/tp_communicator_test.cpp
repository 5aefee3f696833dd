// The CPU communicator and the TCP control plane of tensor parallelism: sums bit-identical on every
// rank and equal to the rank-order f32 sum, gathers and broadcasts, and a rank that is gone makes
// the others fail with GroupError instead of waiting forever.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "unit/tp_test_util.h"

namespace rlm {
namespace {

// Rank r's input: fresh random values (seeded by rank) in `dtype`.
Tensor rank_input(int rank, int64_t n, DType dtype) {
  std::mt19937 rng(1234u + static_cast<uint32_t>(rank));
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector(v).to(dtype);
}

class AllReduce : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(AllReduce, BitIdenticalOnEveryRankAndRankOrderSum) {
  const auto [size, dtype] = GetParam();
  const int64_t n = 1003;  // odd: no alignment luck
  // The reference: f32 sums in rank order, rounded once to the dtype.
  std::vector<float> want(static_cast<size_t>(n), 0.0f);
  for (int r = 0; r < size; ++r) {
    const Tensor in = rank_input(r, n, dtype).to(DType::kF32);
    for (int64_t i = 0; i < n; ++i) want[i] += in.data<float>()[i];
  }
  const Tensor want_t = Tensor::from_vector(want).to(dtype);
  std::vector<Tensor> got(static_cast<size_t>(size));
  testing::run_ranks(size, [&](int rank, Communicator& comm) {
    Tensor t = rank_input(rank, n, dtype);
    comm.all_reduce_sum(t);
    comm.all_reduce_sum(t.slice(0, 0, 0));  // empty: a no-op every rank agrees on
    got[rank] = t;
  });
  for (int r = 0; r < size; ++r) {
    ASSERT_EQ(got[r].nbytes(), want_t.nbytes());
    EXPECT_EQ(std::memcmp(got[r].data_ptr(), want_t.data_ptr(), want_t.nbytes()), 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllReduce,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16, DType::kF16)));

TEST(Communicator, AllGatherStacksRanksAlongDim0AndLastDim) {
  const int size = 3;
  const int64_t m = 5, k = 7;
  std::vector<Tensor> rows(size), cols(size);
  testing::run_ranks(size, [&](int rank, Communicator& comm) {
    const Tensor in = rank_input(rank, m * k, DType::kF32).view({m, k});
    rows[rank] = Tensor::empty({size * m, k}, DType::kF32);
    comm.all_gather(in, rows[rank]);
    cols[rank] = Tensor::empty({m, size * k}, DType::kF32);
    all_gather_last_dim(comm, in, cols[rank]);
  });
  for (int r = 0; r < size; ++r) {
    for (int src = 0; src < size; ++src) {
      const Tensor in = rank_input(src, m * k, DType::kF32).view({m, k});
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          EXPECT_EQ(rows[r].at<float>({src * m + i, j}), in.at<float>({i, j}));
          EXPECT_EQ(cols[r].at<float>({i, src * k + j}), in.at<float>({i, j}));
        }
      }
    }
  }
}

TEST(Communicator, BroadcastAndBarrier) {
  std::vector<std::vector<uint8_t>> got(4);
  testing::run_ranks(4, [&](int rank, Communicator& comm) {
    std::vector<uint8_t> bytes;
    if (rank == 0) bytes = {1, 2, 3, 250};
    comm.broadcast_bytes(bytes);
    comm.barrier();
    got[rank] = bytes;
  });
  for (const auto& g : got) EXPECT_EQ(g, (std::vector<uint8_t>{1, 2, 3, 250}));
}

TEST(TcpGroup, ParsesHostPort) {
  auto hp = parse_host_port("10.0.0.2:29500");
  ASSERT_TRUE(hp.is_ok());
  EXPECT_EQ(hp->host, "10.0.0.2");
  EXPECT_EQ(hp->port, 29500);
  EXPECT_FALSE(parse_host_port("10.0.0.2").is_ok());
  EXPECT_FALSE(parse_host_port(":80").is_ok());
  EXPECT_FALSE(parse_host_port("h:99999").is_ok());
}

// A peer that is gone (its connection closed, as when its process ends) fails the collective on
// the others within the test's timeout — an error, never a hang.
TEST(TcpGroup, DeadPeerIsAnErrorNotAHang) {
  std::vector<std::unique_ptr<TcpGroup>> groups = testing::connect_group(3);
  ASSERT_EQ(groups.size(), 3u);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread dies([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    groups[2].reset();  // rank 2 goes away while rank 0 waits for its part of the sum
  });
  std::string rank1_error;
  std::thread rank1([&] {
    CpuCommunicator comm(*groups[1]);
    Tensor t = Tensor::zeros({16}, DType::kF32);
    try {
      comm.all_reduce_sum(t);
    } catch (const GroupError& e) {
      rank1_error = e.what();
    }
  });
  {
    CpuCommunicator comm(*groups[0]);
    Tensor t = Tensor::zeros({16}, DType::kF32);
    try {
      comm.all_reduce_sum(t);
      ADD_FAILURE() << "the all-reduce finished without rank 2";
    } catch (const GroupError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
  }
  dies.join();
  groups[0].reset();  // rank 0 ends the group: rank 1, waiting for the sum, sees it go
  rank1.join();
  EXPECT_NE(rank1_error.find("rank 0"), std::string::npos) << rank1_error;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(TcpGroup, ClosedPeerIsSeenWithoutReading) {
  std::vector<std::unique_ptr<TcpGroup>> groups = testing::connect_group(2);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0]->closed_peer(50), -1);
  groups[1]->send_message(0, {7});
  groups[1].reset();
  EXPECT_EQ(groups[0]->closed_peer(50), -1);  // a message is still unread
  EXPECT_EQ(groups[0]->recv_message(1), (std::vector<uint8_t>{7}));
  EXPECT_EQ(groups[0]->closed_peer(1000), 1);
}

}  // namespace
}  // namespace rlm
