// The step stream of a tensor-parallel group: rank 0 (which runs the scheduler) sends every
// ModelRunner call that changes the runners' state — build a batch, run its forward, record the
// sampled tokens — and the other ranks replay them on their own runners, so every rank runs the
// same forward on its shard. Messages travel over the group's TCP control plane (a few hundred
// bytes per step). A batch message carries each request's KV slots that the rank has not been
// sent yet (rank 0's prefix cache wrote them into its request table), found by comparing the
// request table's rows with a shadow of what was sent.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/forward_batch.h"
#include "dist/tcp_group.h"

namespace rlm {

class ModelRunner;
class ReqToTokenPool;

enum class StepOp : uint8_t {
  kBuild = 1,
  kForward = 2,
  kRecordTokens = 3,
  kShutdown = 4,
  kCopyStateSlot = 5,
  kBenchCollectives = 6,
};

// Rank 0's side.
class StepSender {
 public:
  explicit StepSender(TcpGroup& group) : group_(group) {}
  // Before ModelRunner::build_batch(mode, entries) on rank 0 (r2t: rank 0's request table).
  void build(ForwardMode mode, const std::vector<BatchEntry>& entries, const ReqToTokenPool& r2t);
  void forward();
  // tokens[i] was sampled for request slot req_slots[i].
  void record_tokens(const std::vector<int32_t>& tokens, const std::vector<int32_t>& req_slots);
  // Rank 0's hybrid cache copied recurrent-state slot src into dst (MambaPool::copy_slot).
  void copy_state_slot(int32_t src, int32_t dst);
  // Before rank 0 runs bench_all_reduce (dist/collectives_bench.h): the others run it too.
  void bench_collectives();
  void shutdown();

 private:
  void send(const std::vector<uint8_t>& message);
  TcpGroup& group_;
  std::vector<std::vector<int32_t>> sent_;  // [max_requests] per request slot: the KV slots sent so far
};

// The other ranks: replays rank 0's messages on `runner` until rank 0 sends kShutdown (returns)
// or is gone (throws GroupError).
void run_step_receiver(TcpGroup& group, ModelRunner& runner);

}  // namespace rlm
