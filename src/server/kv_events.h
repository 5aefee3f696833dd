// KV events: the prefix cache's content changes published over ZeroMQ in vLLM's KVEventsConfig wire
// format, for KV-aware routers (NVIDIA Dynamo, llm-d's precise prefix scorer, vllm-router's
// kv_aware policy) that mirror each worker's cache. `radixlm serve --kv-events-endpoint
// tcp://*:5557 [--kv-events-replay-endpoint tcp://*:5558] [--kv-events-topic T]`.
//
// Blocks. The cache's content is cut into blocks of page_size tokens (every cached node is a whole
// number of pages). A block's hash chains its parent's:
//   hash(block i) = FNV-1a-64 over le64(hash(block i-1)) then le32(token) for each of its tokens,
// with hash(block -1) = 0 for the first block of a sequence (sent as parent_block_hash nil).
// Identical prefixes thus get identical hash chains in every radixlm server.
//
// Wire (vLLM's EventBatch / KVEventBatch, msgspec maps with the "type" tag). Each PUB message is
// three frames: topic (UTF-8), sequence number (8 bytes big-endian, +1 per batch from 0), payload:
//   {"ts": float unix seconds, "events": [event...], "data_parallel_rank": 0}
//   {"type": "BlockStored", "block_hashes": [u64...], "parent_block_hash": u64|nil,
//    "token_ids": [int...], "block_size": page_size, "lora_id": nil, "medium": "GPU", "lora_name": nil}
//   {"type": "BlockRemoved", "block_hashes": [u64...], "medium": "GPU"}
//   {"type": "AllBlocksCleared"}
// Eviction and /flush_cache (which evicts everything) send BlockRemoved; a cache reset sends
// AllBlocksCleared. ("GPU" names the engine's own KV pool tier, as vLLM names it, also when that pool is in host memory
// on a CPU server.) Replay (a ROUTER socket): a request [identity, "", start_seq (8 bytes BE)] gets
// [identity, "", seq, payload] for every kept batch with seq >= start_seq, then
// [identity, "", -1 (8 bytes), ""]. The last 10,000 batches are kept.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/cache_events.h"
#include "core/status.h"

namespace rlm {

// The chained hashes of the blocks of path[begin, path.size()) (begin and the size multiples of
// block_size), and the hash of the block before `begin` (0 when begin == 0).
struct BlockHashes {
  uint64_t parent = 0;
  std::vector<uint64_t> hashes;
};
BlockHashes kv_block_hashes(std::span<const int32_t> path, size_t begin, int32_t block_size);

// One batch of events as its msgpack payload (what the publisher sends; exposed for tests).
class KvEventBatchEncoder {
 public:
  explicit KvEventBatchEncoder(int32_t block_size) : block_size_(block_size) {}
  void stored(std::span<const int32_t> path, size_t node_begin);
  void removed(std::span<const int32_t> path, size_t node_begin);
  void cleared();
  size_t num_events() const { return num_events_; }
  // The payload of {"ts", "events", "data_parallel_rank"}; clears the events.
  std::string finish(double ts);

 private:
  int32_t block_size_;
  std::string events_;  // the encoded events, back to back
  size_t num_events_ = 0;
};

struct KvEventsConfig {
  std::string endpoint;         // PUB socket, bound (tcp://*:5557, tcp://127.0.0.1:5557, ipc://...)
  std::string replay_endpoint;  // ROUTER socket for replays, bound; empty: none
  std::string topic;            // first frame of every message
  int32_t block_size = 1;       // the cache's page size
  size_t buffer_batches = 10000;  // batches kept for replay
};

// Whether this build can publish (it was built with ZeroMQ).
bool kv_events_available();

// The publisher: a CacheEventObserver whose calls (on the scheduler thread) encode events into the
// current batch; its own thread sends the batch when there is one and answers replays, so the
// scheduler never waits on a socket.
class KvEventPublisher : public CacheEventObserver {
 public:
  // Binds the sockets (an error names the endpoint) and starts the thread.
  static StatusOr<std::unique_ptr<KvEventPublisher>> start(const KvEventsConfig& config);
  ~KvEventPublisher() override;
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void on_stored(std::span<const int32_t> path, size_t node_begin) override;
  void on_removed(std::span<const int32_t> path, size_t node_begin) override;
  void on_cleared() override;

  struct Impl;

 private:
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlm
