// Shared by the scheduler tests: a fake model whose "next token" is a hash of the whole sequence as
// read back from the KV cache through req_to_token (any slot mix-up, premature free or wrong prefix
// share changes the output or trips a position check), letter decoding for stop strings, and
// helpers to submit, run and collect requests. Deterministic, CPU only.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "scheduler/scheduler.h"

namespace rlm::testing {

inline constexpr int64_t kVocab = 97;

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xbf58476d1ce4e5b9ULL;
}

inline int32_t next_token(const std::vector<int32_t>& seq) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : seq) h = mix(h, static_cast<uint64_t>(t));
  return static_cast<int32_t>(h % kVocab);
}

class FakeExecutor : public StepExecutor {
 public:
  FakeExecutor(int64_t num_pages, int64_t page_size, int64_t max_reqs, int64_t max_ctx, int32_t eos = -1,
               bool overlap = false)
      : num_pages_(num_pages), page_size_(page_size), table_(max_reqs, max_ctx),
        kv_token_(num_pages * page_size, -1), kv_pos_(num_pages * page_size, -1), eos_(eos), overlap_(overlap) {}
  bool supports_overlap() const override { return overlap_; }
  // Overlap: runs at once, but the results are handed out only by wait(); future tokens are read
  // from what the previous launch sampled for the same request slot, like the device table.
  // Launched steps may carry prompt chunks (overlap covers prefill and mixed steps).
  std::unique_ptr<LaunchedStep> launch(ForwardMode mode, const std::vector<StepItem>& items) override {
    EXPECT_TRUE(overlap_);
    ++launched_steps;
    std::vector<StepItem> resolved = items;
    for (StepItem& it : resolved) {
      if (!it.decode) ++launched_prefill_items;
      const SamplingParams& sp = it.req->params;
      if (sp.logprobs >= 0 || sp.repetition_penalty != 1.0f || sp.frequency_penalty != 0.0f ||
          sp.presence_penalty != 0.0f) {
        ++launched_penalty_items;  // penalties/logprobs no longer pause overlap
      }
      if (it.entry.new_ids[0] == kFutureToken) {
        auto f = last_launch_.find(it.entry.req_slot);
        EXPECT_NE(f, last_launch_.end()) << "future token of request slot " << it.entry.req_slot
                                         << " that the previous launch did not sample";
        if (f != last_launch_.end()) it.entry.new_ids[0] = f->second;
        ++future_tokens;
      }
    }
    auto step = std::make_unique<FakeLaunched>();
    step->results = run(mode, resolved);
    last_launch_.clear();
    size_t k = 0;
    for (const StepItem& it : resolved) {
      if (it.sample) last_launch_[it.entry.req_slot] = step->results[k++].token;
    }
    return step;
  }
  std::vector<SampleResult> wait(LaunchedStep& step) override {
    auto* s = dynamic_cast<FakeLaunched*>(&step);
    EXPECT_NE(s, nullptr);
    EXPECT_FALSE(s->waited) << "a launched step was read twice";
    s->waited = true;
    return s->results;
  }
  ReqToTokenPool& req_to_token() override { return table_; }
  int64_t num_pages() const override { return num_pages_; }
  int64_t page_size() const override { return page_size_; }
  int64_t vocab_size() const override { return kVocab; }
  std::vector<int64_t> eos_token_ids() const override {
    return eos_ >= 0 ? std::vector<int64_t>{eos_} : std::vector<int64_t>{};
  }
  std::vector<SampleResult> run(ForwardMode mode, const std::vector<StepItem>& items) override {
    ++steps;
    std::vector<SampleResult> out;
    bool prompt_seen = false, decode_seen = false;
    for (const StepItem& it : items) {
      const BatchEntry& e = it.entry;
      if (mode == ForwardMode::kDecode) {
        EXPECT_EQ(e.new_ids.size(), 1u);
        EXPECT_TRUE(it.decode) << "a prompt chunk in a decode step";
      }
      if (it.decode) {
        EXPECT_EQ(e.new_ids.size(), 1u);
        EXPECT_TRUE(it.sample);
        EXPECT_FALSE(prompt_seen) << "decode items must come before prompt chunks";
      }
      prompt_seen = prompt_seen || !it.decode;
      decode_seen = decode_seen || it.decode;
      if (mode == ForwardMode::kExtend && !it.decode) {  // prompt tokens (a mixed step also decodes)
        extend_tokens += static_cast<int64_t>(e.new_ids.size());
        if (!it.sample) ++chunk_items;
      }
      table_.write(e.req_slot, e.prefix_len, e.new_slots);
      for (size_t i = 0; i < e.new_ids.size(); ++i) {
        kv_token_[e.new_slots[i]] = e.new_ids[i];
        kv_pos_[e.new_slots[i]] = e.prefix_len + static_cast<int32_t>(i);
      }
      if (!it.sample) continue;
      const int64_t len = e.prefix_len + static_cast<int64_t>(e.new_ids.size());
      std::vector<int32_t> slots = table_.read(e.req_slot, 0, len);
      std::vector<int32_t> seq;
      for (int64_t p = 0; p < len; ++p) {
        EXPECT_EQ(kv_pos_[slots[p]], p) << "slot " << slots[p] << " holds the wrong position";
        seq.push_back(kv_token_[slots[p]]);
      }
      SampleResult r;
      r.token = next_token(seq);
      out.push_back(r);
    }
    if (prompt_seen && decode_seen) ++mixed_steps;
    int64_t tokens = 0, prompt_tokens = 0;
    for (const StepItem& it : items) {
      tokens += static_cast<int64_t>(it.entry.new_ids.size());
      if (!it.decode) prompt_tokens += static_cast<int64_t>(it.entry.new_ids.size());
    }
    max_step_tokens = std::max(max_step_tokens, tokens);
    if (decode_seen) max_mixed_prompt_tokens = std::max(max_mixed_prompt_tokens, prompt_tokens);
    return out;
  }
  int64_t steps = 0, extend_tokens = 0, chunk_items = 0, launched_steps = 0, future_tokens = 0,
          launched_penalty_items = 0, launched_prefill_items = 0, mixed_steps = 0, max_step_tokens = 0,
          max_mixed_prompt_tokens = 0;  // most prompt tokens of a step that also decodes

 private:
  struct FakeLaunched : LaunchedStep {
    std::vector<SampleResult> results;
    bool waited = false;
  };
  int64_t num_pages_, page_size_;
  ReqToTokenPool table_;
  std::vector<int32_t> kv_token_, kv_pos_;
  int32_t eos_;
  bool overlap_ = false;
  std::map<int32_t, int32_t> last_launch_;  // request slot -> token sampled by the latest launch
};

// Token t decodes to one letter, so stop strings can span tokens.
class LetterDecoder : public TokenTextDecoder {
 public:
  std::string push(int32_t t) override { return std::string(1, static_cast<char>('a' + t % 26)); }
  std::string flush() override { return ""; }
};
inline TokenTextDecoderFactory letters() {
  return [](bool, const std::vector<int32_t>&) { return std::make_unique<LetterDecoder>(); };
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<FinishInfo> finish;
};

inline Collected drain(RequestStream& s) {
  Collected c;
  while (auto e = s.pop(std::chrono::milliseconds(0))) {
    EXPECT_FALSE(c.finish.has_value()) << "event after the final one";
    c.tokens.insert(c.tokens.end(), e->token_ids.begin(), e->token_ids.end());
    c.text += e->text;
    if (e->finish) c.finish = e->finish;
  }
  return c;
}

inline std::vector<int32_t> reference(std::vector<int32_t> seq, int64_t max_tokens, int32_t eos = -1) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_tokens) {
    int32_t t = next_token(seq);
    out.push_back(t);
    seq.push_back(t);
    if (t == eos) break;
  }
  return out;
}

inline std::shared_ptr<Req> make_req(const std::string& rid, std::vector<int32_t> prompt, int64_t max_tokens) {
  auto r = std::make_shared<Req>();
  r->rid = rid;
  r->prompt_ids = std::move(prompt);
  r->params.max_new_tokens = max_tokens;
  r->stream = std::make_shared<RequestStream>();
  return r;
}

inline std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> d(0, kVocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline void run_to_completion(Scheduler& s) {
  for (int i = 0; i < 100000 && s.has_work(); ++i) {
    s.step();
    Status st = s.check_integrity();
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  ASSERT_FALSE(s.has_work()) << "scheduler did not finish: running " << s.num_running() << ", pending "
                             << s.num_pending() << ", free pages " << s.num_free_pages() << ", cache "
                             << s.cache().total_size() << " (evictable " << s.cache().evictable_size() << ")";
}

}  // namespace rlm::testing
