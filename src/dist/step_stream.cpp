#include "dist/step_stream.h"

#include <cstring>

#include "dist/collectives_bench.h"
#include "dist/tp_group.h"
#include "engine/model_runner.h"

namespace rlm {

namespace {

class Writer {
 public:
  std::vector<uint8_t> bytes;
  template <typename T>
  void put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
  }
  void put_ints(const int32_t* p, size_t n) {
    put<uint64_t>(n);
    const size_t at = bytes.size();
    bytes.resize(at + n * sizeof(int32_t));
    if (n > 0) std::memcpy(bytes.data() + at, p, n * sizeof(int32_t));
  }
  void put_ints(const std::vector<int32_t>& v) { put_ints(v.data(), v.size()); }
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& b) : b_(b) {}
  template <typename T>
  T get() {
    RLM_CHECK(at_ + sizeof(T) <= b_.size()) << "truncated step message (" << b_.size() << " bytes)";
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::vector<int32_t> get_ints() {
    const uint64_t n = get<uint64_t>();
    RLM_CHECK(at_ + n * sizeof(int32_t) <= b_.size()) << "truncated step message (" << b_.size() << " bytes)";
    std::vector<int32_t> v(n);
    if (n > 0) std::memcpy(v.data(), b_.data() + at_, n * sizeof(int32_t));
    at_ += n * sizeof(int32_t);
    return v;
  }

 private:
  const std::vector<uint8_t>& b_;
  size_t at_ = 0;
};

}  // namespace

void StepSender::send(const std::vector<uint8_t>& message) {
  for (int r = 1; r < group_.size(); ++r) group_.send_message(r, message);
}

void StepSender::build(ForwardMode mode, const std::vector<BatchEntry>& entries, const ReqToTokenPool& r2t) {
  if (sent_.empty()) sent_.resize(static_cast<size_t>(r2t.max_requests()));
  Writer w;
  w.put(StepOp::kBuild);
  w.put(mode);
  w.put<uint64_t>(entries.size());
  for (const BatchEntry& e : entries) {
    // The prefix's slots the other ranks do not have yet: from the first position where rank 0's
    // table differs from what was sent.
    std::vector<int32_t>& sent = sent_.at(static_cast<size_t>(e.req_slot));
    const std::vector<int32_t> prefix = r2t.read(e.req_slot, 0, e.prefix_len);
    size_t same = 0;
    while (same < prefix.size() && same < sent.size() && prefix[same] == sent[same]) ++same;
    w.put(e.req_slot);
    w.put(e.prefix_len);
    w.put<uint64_t>(same);
    w.put_ints(prefix.data() + same, prefix.size() - same);
    w.put_ints(e.new_ids);
    w.put_ints(e.new_slots);
    w.put<uint8_t>(static_cast<uint8_t>(e.all_logits) | static_cast<uint8_t>(e.skip_logits) << 1);
    w.put(e.mamba_slot);
    w.put(e.mamba_track_slot);
    w.put(e.mamba_track_pos);
    sent = prefix;
    sent.insert(sent.end(), e.new_slots.begin(), e.new_slots.end());
  }
  send(w.bytes);
}

void StepSender::forward() {
  Writer w;
  w.put(StepOp::kForward);
  send(w.bytes);
}

void StepSender::record_tokens(const std::vector<int32_t>& tokens, const std::vector<int32_t>& req_slots) {
  Writer w;
  w.put(StepOp::kRecordTokens);
  w.put_ints(tokens);
  w.put_ints(req_slots);
  send(w.bytes);
}

void StepSender::copy_state_slot(int32_t src, int32_t dst) {
  Writer w;
  w.put(StepOp::kCopyStateSlot);
  w.put(src);
  w.put(dst);
  send(w.bytes);
}

void StepSender::bench_collectives() {
  Writer w;
  w.put(StepOp::kBenchCollectives);
  send(w.bytes);
}

void StepSender::shutdown() {
  Writer w;
  w.put(StepOp::kShutdown);
  send(w.bytes);
}

void run_step_receiver(TcpGroup& group, ModelRunner& runner) {
  ForwardBatch batch;
  bool built = false;
  while (true) {
    const std::vector<uint8_t> message = group.recv_message(0);
    Reader r(message);
    switch (r.get<StepOp>()) {
      case StepOp::kBuild: {
        const ForwardMode mode = r.get<ForwardMode>();
        std::vector<BatchEntry> entries(r.get<uint64_t>());
        for (BatchEntry& e : entries) {
          e.req_slot = r.get<int32_t>();
          e.prefix_len = r.get<int32_t>();
          const uint64_t same = r.get<uint64_t>();
          const std::vector<int32_t> prefix_tail = r.get_ints();
          e.new_ids = r.get_ints();
          e.new_slots = r.get_ints();
          const uint8_t flags = r.get<uint8_t>();
          e.all_logits = (flags & 1) != 0;
          e.skip_logits = (flags & 2) != 0;
          e.mamba_slot = r.get<int32_t>();
          e.mamba_track_slot = r.get<int32_t>();
          e.mamba_track_pos = r.get<int32_t>();
          runner.req_to_token().adopt(e.req_slot);
          for (const int32_t m : {e.mamba_slot, e.mamba_track_slot}) {
            if (m >= 0) runner.mamba_pool()->adopt(m);
          }
          if (!prefix_tail.empty()) runner.req_to_token().write(e.req_slot, static_cast<int64_t>(same), prefix_tail);
        }
        batch = runner.build_batch(mode, entries);
        built = true;
        break;
      }
      case StepOp::kForward:
        RLM_CHECK(built) << "step stream: a forward before any batch";
        (void)runner.forward(batch);
        break;
      case StepOp::kRecordTokens: {
        const std::vector<int32_t> tokens = r.get_ints();
        const std::vector<int32_t> slots = r.get_ints();
        runner.record_sampled_tokens(Tensor::from_vector(tokens).to(runner.config().device), slots);
        break;
      }
      case StepOp::kCopyStateSlot: {
        const int32_t src = r.get<int32_t>(), dst = r.get<int32_t>();
        runner.mamba_pool()->adopt(src);
        runner.mamba_pool()->adopt(dst);
        runner.mamba_pool()->copy_slot(src, dst);
        break;
      }
      case StepOp::kBenchCollectives:
        RLM_CHECK(runner.config().tp_group != nullptr)
            << "step stream: a collectives benchmark without a group";
        (void)bench_all_reduce(runner.config().tp_group->comm(), runner.config().device);
        break;
      case StepOp::kShutdown:
        return;
      default:
        fail("step stream: unknown message");
    }
  }
}

}  // namespace rlm
