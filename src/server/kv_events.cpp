#include "server/kv_events.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "core/check.h"

#ifdef RADIXLM_WITH_ZMQ
#include <zmq.hpp>
#endif

namespace rlm {

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t fnv_bytes(uint64_t h, uint64_t value, int num_bytes) {
  for (int i = 0; i < num_bytes; ++i) {
    h ^= (value >> (8 * i)) & 0xff;
    h *= kFnvPrime;
  }
  return h;
}

// ---- msgpack, the subset the events use ----
void put_be(std::string& out, uint64_t v, int num_bytes) {
  for (int i = num_bytes - 1; i >= 0; --i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

void put_uint(std::string& out, uint64_t v) {
  if (v < 0x80) {
    out += static_cast<char>(v);
  } else if (v <= 0xff) {
    out += '\xcc';
    put_be(out, v, 1);
  } else if (v <= 0xffff) {
    out += '\xcd';
    put_be(out, v, 2);
  } else if (v <= 0xffffffffULL) {
    out += '\xce';
    put_be(out, v, 4);
  } else {
    out += '\xcf';
    put_be(out, v, 8);
  }
}

void put_nil(std::string& out) { out += '\xc0'; }

void put_double(std::string& out, double v) {
  uint64_t bits;
  static_assert(sizeof(bits) == sizeof(v));
  std::memcpy(&bits, &v, sizeof(v));
  out += '\xcb';
  put_be(out, bits, 8);
}

// Array (0x90 / 0xdc / 0xdd), map (0x80 / 0xde / 0xdf) and str (0xa0 / 0xd9 / 0xda / 0xdb) headers.
void put_header(std::string& out, size_t n, uint8_t fix, size_t fix_max, uint8_t c8, uint8_t c16, uint8_t c32) {
  if (n <= fix_max) {
    out += static_cast<char>(fix | n);
  } else if (c8 != 0 && n <= 0xff) {
    out += static_cast<char>(c8);
    put_be(out, n, 1);
  } else if (n <= 0xffff) {
    out += static_cast<char>(c16);
    put_be(out, n, 2);
  } else {
    out += static_cast<char>(c32);
    put_be(out, n, 4);
  }
}
void put_array(std::string& out, size_t n) { put_header(out, n, 0x90, 15, 0, 0xdc, 0xdd); }
void put_map(std::string& out, size_t n) { put_header(out, n, 0x80, 15, 0, 0xde, 0xdf); }
void put_str(std::string& out, std::string_view s) {
  put_header(out, s.size(), 0xa0, 31, 0xd9, 0xda, 0xdb);
  out += s;
}

}  // namespace

BlockHashes kv_block_hashes(std::span<const int32_t> path, size_t begin, int32_t block_size) {
  const size_t bs = static_cast<size_t>(block_size);
  RLM_CHECK(block_size > 0 && begin % bs == 0 && path.size() % bs == 0 && begin <= path.size())
      << "blocks of " << block_size << " tokens over [" << begin << ", " << path.size() << ")";
  BlockHashes out;
  uint64_t h = 0;
  for (size_t b = 0; b < path.size(); b += bs) {
    if (b == begin) out.parent = h;
    uint64_t next = fnv_bytes(kFnvOffset, h, 8);
    for (size_t i = b; i < b + bs; ++i) next = fnv_bytes(next, static_cast<uint32_t>(path[i]), 4);
    h = next;
    if (b >= begin) out.hashes.push_back(h);
  }
  return out;
}

namespace {

// The head both block events share: a map of num_fields entries, its "type" tag and "block_hashes".
void put_block_event(std::string& out, const char* type, size_t num_fields, const std::vector<uint64_t>& hashes) {
  put_map(out, num_fields);
  put_str(out, "type");
  put_str(out, type);
  put_str(out, "block_hashes");
  put_array(out, hashes.size());
  for (uint64_t h : hashes) put_uint(out, h);
}

}  // namespace

void KvEventBatchEncoder::stored(std::span<const int32_t> path, size_t node_begin) {
  const BlockHashes bh = kv_block_hashes(path, node_begin, block_size_);
  put_block_event(events_, "BlockStored", 8, bh.hashes);
  put_str(events_, "parent_block_hash");
  if (node_begin == 0) {
    put_nil(events_);
  } else {
    put_uint(events_, bh.parent);
  }
  put_str(events_, "token_ids");
  put_array(events_, path.size() - node_begin);
  for (size_t i = node_begin; i < path.size(); ++i) put_uint(events_, static_cast<uint32_t>(path[i]));
  put_str(events_, "block_size");
  put_uint(events_, static_cast<uint64_t>(block_size_));
  put_str(events_, "lora_id");
  put_nil(events_);
  put_str(events_, "medium");
  put_str(events_, "GPU");
  put_str(events_, "lora_name");
  put_nil(events_);
  ++num_events_;
}

void KvEventBatchEncoder::removed(std::span<const int32_t> path, size_t node_begin) {
  put_block_event(events_, "BlockRemoved", 3, kv_block_hashes(path, node_begin, block_size_).hashes);
  put_str(events_, "medium");
  put_str(events_, "GPU");
  ++num_events_;
}

void KvEventBatchEncoder::cleared() {
  put_map(events_, 1);
  put_str(events_, "type");
  put_str(events_, "AllBlocksCleared");
  ++num_events_;
}

std::string KvEventBatchEncoder::finish(double ts) {
  std::string out;
  put_map(out, 3);
  put_str(out, "ts");
  put_double(out, ts);
  put_str(out, "events");
  put_array(out, num_events_);
  out += events_;
  put_str(out, "data_parallel_rank");
  put_uint(out, 0);
  events_.clear();
  num_events_ = 0;
  return out;
}

#ifdef RADIXLM_WITH_ZMQ

bool kv_events_available() { return true; }

struct KvEventPublisher::Impl {
  KvEventsConfig config;
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
  std::mutex mu;
  KvEventBatchEncoder pending;  // under mu: events not yet sent
  std::deque<std::pair<uint64_t, std::string>> kept;  // publisher thread only: (seq, payload) for replays
  uint64_t next_seq = 0;
  std::atomic<bool> stop{false};
  std::thread thread;

  explicit Impl(const KvEventsConfig& c) : config(c), pending(c.block_size) {}

  void send_pending() {
    std::string payload;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (pending.num_events() == 0) return;
      const double ts =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      payload = pending.finish(ts);
    }
    const uint64_t seq = next_seq++;
    std::string seq_bytes;
    put_be(seq_bytes, seq, 8);
    pub.send(zmq::buffer(config.topic), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(payload), zmq::send_flags::none);
    kept.emplace_back(seq, std::move(payload));
    if (kept.size() > config.buffer_batches) kept.pop_front();
  }

  // One replay request, if one waits: [identity, "", start_seq].
  void serve_replay() {
    std::vector<zmq::message_t> frames;
    while (true) {
      zmq::message_t m;
      if (!replay->recv(m, zmq::recv_flags::dontwait)) break;
      const bool more = m.more();
      frames.push_back(std::move(m));
      if (!more) break;
    }
    if (frames.size() != 3 || frames[2].size() != 8) return;  // not a replay request: ignored
    uint64_t start = 0;
    for (size_t i = 0; i < 8; ++i) start = (start << 8) | static_cast<const uint8_t*>(frames[2].data())[i];
    auto reply = [&](const std::string& seq_bytes, const std::string& payload) {
      replay->send(zmq::buffer(frames[0].data(), frames[0].size()), zmq::send_flags::sndmore);
      replay->send(zmq::message_t(), zmq::send_flags::sndmore);
      replay->send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore);
      replay->send(zmq::buffer(payload), zmq::send_flags::none);
    };
    for (const auto& [seq, payload] : kept) {
      if (seq < start) continue;
      std::string seq_bytes;
      put_be(seq_bytes, seq, 8);
      reply(seq_bytes, payload);
    }
    reply(std::string(8, '\xff'), "");
  }

  void run() {
    while (true) {
      const bool stopping = stop.load();
      if (replay) {
        zmq::pollitem_t item{replay->handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(stopping ? 0 : 5));
        // Batches are sent before a replay is answered, so the replay includes what is published.
        send_pending();
        if (item.revents & ZMQ_POLLIN) serve_replay();
      } else {
        if (!stopping) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        send_pending();
      }
      if (stopping) return;
    }
  }
};

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::start(const KvEventsConfig& config) {
  if (config.block_size <= 0) return invalid_argument("KV events need a positive block size");
  auto impl = std::make_unique<Impl>(config);
  try {
    impl->pub.set(zmq::sockopt::sndhwm, 100000);
    impl->pub.set(zmq::sockopt::linger, 200);
    impl->pub.bind(config.endpoint);
  } catch (const zmq::error_t& e) {
    return invalid_argument(str("--kv-events-endpoint ", config.endpoint, ": ", e.what()));
  }
  if (!config.replay_endpoint.empty()) {
    try {
      impl->replay.emplace(impl->ctx, zmq::socket_type::router);
      impl->replay->set(zmq::sockopt::linger, 200);
      impl->replay->bind(config.replay_endpoint);
    } catch (const zmq::error_t& e) {
      return invalid_argument(str("--kv-events-replay-endpoint ", config.replay_endpoint, ": ", e.what()));
    }
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(impl)));
}

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvEventPublisher::~KvEventPublisher() {
  impl_->stop = true;
  impl_->thread.join();
}

void KvEventPublisher::on_stored(std::span<const int32_t> path, size_t node_begin) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending.stored(path, node_begin);
}

void KvEventPublisher::on_removed(std::span<const int32_t> path, size_t node_begin) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending.removed(path, node_begin);
}

void KvEventPublisher::on_cleared() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending.cleared();
}

#else  // built without ZeroMQ

bool kv_events_available() { return false; }

struct KvEventPublisher::Impl {};

StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::start(const KvEventsConfig& config) {
  return invalid_argument(str("--kv-events-endpoint ", config.endpoint,
                              ": this radixlm was built without ZeroMQ (install libzmq3-dev and cppzmq-dev, "
                              "then reconfigure with -DRADIXLM_KV_EVENTS=ON)"));
}
// start() always fails in this build, so no publisher exists to observe anything.
KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KvEventPublisher::~KvEventPublisher() = default;
void KvEventPublisher::on_stored(std::span<const int32_t>, size_t) {}
void KvEventPublisher::on_removed(std::span<const int32_t>, size_t) {}
void KvEventPublisher::on_cleared() {}

#endif

}  // namespace rlm
