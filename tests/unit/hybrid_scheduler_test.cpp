// The scheduler with a hybrid (linear-attention) model: a fake StepExecutor whose "recurrent
// state" lives in a CPU MambaPool (conv_state holds two running hashes of the tokens so far, the
// SSM state their count) and is read at prefix_len and written at seq_len exactly as ForwardBatch
// specifies, with snapshots at mamba_track_pos. The state it reads must be the state of the
// tokens that KV holds at [0, prefix_len), and its next token depends on the state and on the
// sequence read back from KV, so a wrong resume point, a missing copy-on-write or a corrupted
// snapshot changes the output or trips a check. Deterministic, CPU only.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "cache/mamba_pool.h"
#include "scheduler/scheduler.h"

namespace rlm {
namespace {

constexpr int64_t kVocab = 97;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xbf58476d1ce4e5b9ULL;
}

// The recurrent state after a sequence; every field stays below 2^24, exact in f32.
struct State {
  int64_t h1 = 0, h2 = 0, count = 0;
  bool operator==(const State&) const = default;
  void step(int32_t t) {
    h1 = (h1 * 131 + t + 1) % 1000003;
    h2 = (h2 * 257 + 7 * t + 3) % 999983;
    ++count;
  }
};

State state_of(const std::vector<int32_t>& seq) {
  State s;
  for (int32_t t : seq) s.step(t);
  return s;
}

int32_t next_token(const State& s, const std::vector<int32_t>& seq) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : seq) h = mix(h, static_cast<uint64_t>(t));
  h = mix(mix(mix(h, static_cast<uint64_t>(s.h1)), static_cast<uint64_t>(s.h2)),
          static_cast<uint64_t>(s.count));
  return static_cast<int32_t>(h % kVocab);
}

std::vector<int32_t> reference(std::vector<int32_t> seq, int64_t max_tokens) {
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < max_tokens) {
    const int32_t t = next_token(state_of(seq), seq);
    out.push_back(t);
    seq.push_back(t);
  }
  return out;
}

MambaShape fake_shape() {
  MambaShape s;
  s.num_layers = 1;
  s.conv_dim = 1;
  s.conv_width = 2;
  s.num_v_heads = 1;
  s.head_k_dim = 1;
  s.head_v_dim = 1;
  return s;
}

class HybridExecutor : public StepExecutor {
 public:
  HybridExecutor(int64_t num_pages, int64_t page_size, int64_t max_reqs, int64_t max_ctx, int64_t mamba_slots)
      : num_pages_(num_pages),
        page_size_(page_size),
        table_(max_reqs, max_ctx),
        pool_(fake_shape(), mamba_slots),
        kv_token_(num_pages * page_size, -1),
        kv_pos_(num_pages * page_size, -1) {}
  ReqToTokenPool& req_to_token() override { return table_; }
  int64_t num_pages() const override { return num_pages_; }
  int64_t page_size() const override { return page_size_; }
  int64_t vocab_size() const override { return kVocab; }
  std::vector<int64_t> eos_token_ids() const override { return {}; }
  MambaPool* mamba_pool() override { return &pool_; }

  State read(int32_t slot) const {
    const float* conv = pool_.conv_state(0).data<float>() + slot * 2;
    return State{static_cast<int64_t>(conv[0]), static_cast<int64_t>(conv[1]),
                 static_cast<int64_t>(pool_.ssm_state(0).data<float>()[slot])};
  }
  void write(int32_t slot, const State& s) {
    float* conv = pool_.conv_state(0).data<float>() + slot * 2;
    conv[0] = static_cast<float>(s.h1);
    conv[1] = static_cast<float>(s.h2);
    pool_.ssm_state(0).data<float>()[slot] = static_cast<float>(s.count);
  }

  std::vector<SampleResult> run(ForwardMode mode, const std::vector<StepItem>& items) override {
    std::vector<SampleResult> out;
    std::set<int32_t> used;
    for (const StepItem& it : items) {
      const BatchEntry& e = it.entry;
      const int64_t n = static_cast<int64_t>(e.new_ids.size());
      if (mode == ForwardMode::kDecode) {
        EXPECT_EQ(n, 1);
      }
      if (mode == ForwardMode::kExtend && !it.decode) extend_tokens += n;  // prompt tokens
      EXPECT_TRUE(pool_.in_use(e.mamba_slot)) << "working state slot " << e.mamba_slot << " is not allocated";
      EXPECT_TRUE(used.insert(e.mamba_slot).second) << "two requests share state slot " << e.mamba_slot;
      table_.write(e.req_slot, e.prefix_len, e.new_slots);
      for (int64_t i = 0; i < n; ++i) {
        kv_token_[e.new_slots[i]] = e.new_ids[i];
        kv_pos_[e.new_slots[i]] = e.prefix_len + static_cast<int32_t>(i);
      }
      const int64_t len = e.prefix_len + n;
      std::vector<int32_t> seq;
      for (const int32_t slot : table_.read(e.req_slot, 0, len)) {
        EXPECT_EQ(kv_pos_[slot], static_cast<int32_t>(seq.size()))
            << "slot " << slot << " holds the wrong position";
        seq.push_back(kv_token_[slot]);
      }
      // The contract: the working slot holds the state after prefix_len tokens (zero at 0).
      State s = e.prefix_len == 0 ? State{} : read(e.mamba_slot);
      EXPECT_EQ(s, state_of(std::vector<int32_t>(seq.begin(), seq.begin() + e.prefix_len)))
          << "the state read at prefix " << e.prefix_len << " is not the state of the cached tokens";
      if (e.mamba_track_slot >= 0) {
        EXPECT_TRUE(pool_.in_use(e.mamba_track_slot));
        EXPECT_NE(e.mamba_track_slot, e.mamba_slot);
        EXPECT_TRUE(used.insert(e.mamba_track_slot).second) << "snapshot slot shared in one step";
        EXPECT_TRUE(e.mamba_track_pos > e.prefix_len && e.mamba_track_pos <= len)
            << "snapshot outside this step";
        EXPECT_EQ(e.mamba_track_pos % align, 0) << "snapshot at an unaligned position";
        ++snapshots;
      }
      for (int64_t i = 0; i < n; ++i) {
        s.step(e.new_ids[i]);
        if (e.prefix_len + i + 1 == e.mamba_track_pos && e.mamba_track_slot >= 0) {
          write(e.mamba_track_slot, s);
          last_snapshot[e.mamba_track_pos] = e.mamba_track_slot;
        }
      }
      write(e.mamba_slot, s);
      if (!it.sample) continue;
      SampleResult r;
      r.token = next_token(s, seq);
      out.push_back(r);
    }
    return out;
  }

  int64_t extend_tokens = 0, snapshots = 0, align = 1;
  std::map<int64_t, int32_t> last_snapshot;  // position -> the slot most recently snapshotted there

 private:
  int64_t num_pages_, page_size_;
  ReqToTokenPool table_;
  MambaPool pool_;
  std::vector<int32_t> kv_token_, kv_pos_;
};

class NoText : public TokenTextDecoder {
 public:
  std::string push(int32_t) override { return ""; }
  std::string flush() override { return ""; }
};
TokenTextDecoderFactory no_text() {
  return [](bool, const std::vector<int32_t>&) { return std::make_unique<NoText>(); };
}

struct Collected {
  std::vector<int32_t> tokens;
  std::optional<FinishInfo> finish;
};

Collected drain(RequestStream& s) {
  Collected c;
  while (auto e = s.pop(std::chrono::milliseconds(0))) {
    c.tokens.insert(c.tokens.end(), e->token_ids.begin(), e->token_ids.end());
    if (e->finish) c.finish = e->finish;
  }
  return c;
}

std::shared_ptr<Req> make_req(const std::string& rid, std::vector<int32_t> prompt, int64_t max_tokens) {
  auto r = std::make_shared<Req>();
  r->rid = rid;
  r->prompt_ids = std::move(prompt);
  r->params.max_new_tokens = max_tokens;
  r->stream = std::make_shared<RequestStream>();
  return r;
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> d(0, kVocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

void step_checked(Scheduler& s) {
  s.step();
  const Status st = s.check_integrity();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
}

void run_to_completion(Scheduler& s) {
  for (int i = 0; i < 100000 && s.has_work(); ++i) {
    step_checked(s);
    if (::testing::Test::HasFatalFailure()) return;
  }
  ASSERT_FALSE(s.has_work()) << "scheduler did not finish: running " << s.num_running() << ", pending "
                             << s.num_pending() << ", free pages " << s.num_free_pages()
                             << ", free state slots " << s.num_free_mamba_slots();
}

// Everything returns: pages, request rows, state slots (after the cache is flushed).
void expect_all_free(Scheduler& s, HybridExecutor& exec) {
  ASSERT_TRUE(s.check_integrity().is_ok());
  s.flush_cache();
  EXPECT_EQ(s.cache().total_size(), 0);
  EXPECT_EQ(s.cache().mamba_size(), 0);
  EXPECT_EQ(s.num_free_pages(), exec.num_pages()) << "KV pages leaked";
  EXPECT_EQ(exec.mamba_pool()->num_free(), exec.mamba_pool()->num_slots()) << "state slots leaked";
  EXPECT_EQ(exec.req_to_token().num_free(), exec.req_to_token().max_requests());
}

struct Params {
  int64_t page_size;
  std::string cache;
  int64_t chunked_prefill;
  int64_t mamba_slots;
  std::string policy = "fcfs";
};

struct RunResult {
  std::map<std::string, std::vector<int32_t>> outputs;  // finished by length
  int64_t cached_tokens = 0, retractions = 0, mamba_evictions = 0, snapshots = 0;
};

// Prompts share prefixes whose lengths straddle chunk boundaries (63, 64, 65, 127, 128, 150);
// KV and state pools are tight; some requests are aborted midway.
RunResult run_workload(const Params& p, uint32_t seed) {
  RunResult result;
  std::mt19937 rng(seed);
  const int64_t num_pages = 300 / p.page_size + 1;
  HybridExecutor exec(num_pages, p.page_size, 8, 320, p.mamba_slots);
  SchedulerConfig cfg;
  cfg.cache = parse_cache_kind(p.cache).value();
  cfg.policy = parse_schedule_policy(p.policy).value();
  cfg.mamba_chunk_size = 64;
  cfg.chunked_prefill_size = p.chunked_prefill;
  cfg.max_prefill_tokens = 2 * p.chunked_prefill;
  cfg.max_running_requests = 6;
  cfg.init_new_token_ratio = 0.0;  // over-commit KV: decode has to retract
  cfg.min_new_token_ratio = 0.0;
  auto metrics = std::make_shared<ServingMetrics>();
  Scheduler s(exec, cfg, no_text(), metrics);
  exec.align = p.cache == "radix" ? s.cache().mamba_align() : 1;
  const std::vector<int32_t> base = random_ids(rng, 150);
  const std::vector<int64_t> cuts = {63, 64, 65, 127, 128, 150};
  std::vector<std::shared_ptr<Req>> reqs;
  std::set<std::string> aborted;
  for (int i = 0; i < 36; ++i) {
    std::vector<int32_t> prompt(base.begin(), base.begin() + cuts[rng() % cuts.size()]);
    if (i % 5 == 4) prompt.resize(1 + rng() % 40);  // shorter than one chunk
    const auto tail = random_ids(rng, 1 + rng() % 40);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    reqs.push_back(make_req("r" + std::to_string(i), prompt, 1 + rng() % 70));
    EXPECT_TRUE(s.submit(reqs.back()).is_ok());
    if (i % 4 == 0) step_checked(s);
    if (i % 9 == 8) {
      const std::string victim = "r" + std::to_string(rng() % (i + 1));
      aborted.insert(victim);
      s.abort(victim);
    }
    if (::testing::Test::HasFatalFailure()) return result;
  }
  run_to_completion(s);
  if (::testing::Test::HasFatalFailure()) return result;
  for (auto& r : reqs) {
    Collected c = drain(*r->stream);
    EXPECT_TRUE(c.finish.has_value()) << r->rid;
    if (!c.finish) continue;
    if (c.finish->reason == "abort") {
      EXPECT_TRUE(aborted.count(r->rid)) << r->rid << " was aborted but nobody asked";
      continue;
    }
    EXPECT_EQ(c.finish->reason, "length") << r->rid;
    EXPECT_EQ(c.tokens, reference(r->prompt_ids, r->params.max_new_tokens)) << r->rid;
    result.outputs[r->rid] = c.tokens;
    if (p.cache == "naive") {
      EXPECT_EQ(c.finish->cached_tokens, 0) << r->rid;
    }
    if (p.cache == "radix") {
      EXPECT_EQ(c.finish->cached_tokens % 64, 0) << r->rid << ": resumed off a chunk boundary";
    }
  }
  result.cached_tokens = metrics->cached_tokens();
  result.retractions = metrics->retractions();
  result.mamba_evictions = s.mamba_evictions();
  result.snapshots = exec.snapshots;
  expect_all_free(s, exec);
  return result;
}

class HybridSchedulerMatrix : public ::testing::TestWithParam<Params> {};

TEST_P(HybridSchedulerMatrix, OutputsEqualNaiveAndReferenceAndEverythingIsFreed) {
  const Params p = GetParam();
  const uint32_t seed = std::getenv("RADIXLM_TEST_SEED") ? std::stoul(std::getenv("RADIXLM_TEST_SEED"))
                                                         : std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RunResult hybrid = run_workload(p, seed);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  Params naive_p = p;
  naive_p.cache = "naive";
  const RunResult naive = run_workload(naive_p, seed);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  for (const auto& [rid, tokens] : hybrid.outputs) {
    auto it = naive.outputs.find(rid);
    if (it != naive.outputs.end()) {
      EXPECT_EQ(tokens, it->second) << rid;
    }
  }
  if (std::getenv("RADIXLM_TEST_VERBOSE") != nullptr) {
    std::printf("%s: cached %lld, retractions %lld, snapshot evictions %lld, snapshots %lld, finished %zu\n",
                p.cache.c_str(), static_cast<long long>(hybrid.cached_tokens),
                static_cast<long long>(hybrid.retractions), static_cast<long long>(hybrid.mamba_evictions),
                static_cast<long long>(hybrid.snapshots), hybrid.outputs.size());
  }
  EXPECT_GT(hybrid.retractions, 0) << "the KV pool was meant to force retraction";
  if (p.cache == "radix") {
    EXPECT_GT(hybrid.cached_tokens, 0) << "shared prefixes were never reused";
    EXPECT_GT(hybrid.snapshots, 0);
    if (p.mamba_slots <= 10) {
      EXPECT_GT(hybrid.mamba_evictions, 0) << "the state pool was meant to run dry";
    }
  } else {
    EXPECT_EQ(hybrid.snapshots, 0) << "the naive cache keeps no snapshots, so none should be taken";
  }
}

INSTANTIATE_TEST_SUITE_P(All, HybridSchedulerMatrix,
                         ::testing::Values(Params{1, "radix", 48, 5}, Params{1, "radix", 512, 32},
                                           Params{16, "radix", 48, 6}, Params{16, "radix", 80, 24},
                                           Params{1, "radix", 48, 8, "lpm"}, Params{1, "naive", 48, 6},
                                           Params{16, "naive", 512, 6}),
                         [](const auto& info) {
                           return info.param.cache + "_" + info.param.policy + "_page" +
                                  std::to_string(info.param.page_size) + "_chunk" +
                                  std::to_string(info.param.chunked_prefill) + "_slots" +
                                  std::to_string(info.param.mamba_slots);
                         });

struct Rig {
  explicit Rig(int64_t page_size, int64_t chunked_prefill = 2048)
      : exec(1024 / page_size, page_size, 4, 512, 16), s(exec, config(chunked_prefill), no_text()) {
    exec.align = s.cache().mamba_align();
  }
  static SchedulerConfig config(int64_t chunked_prefill) {
    SchedulerConfig cfg;
    cfg.chunked_prefill_size = chunked_prefill;
    return cfg;
  }
  Collected run(const std::shared_ptr<Req>& r) {
    EXPECT_TRUE(s.submit(r).is_ok());
    run_to_completion(s);
    return drain(*r->stream);
  }
  HybridExecutor exec;
  Scheduler s;
};

// docs/design/hybrid_radix_cache.md's example, request 3: a 150-token prompt leaves a snapshot at 128 (the last chunk boundary), so
// a request sharing those 150 tokens resumes at 128 and recomputes the rest.
TEST(HybridScheduler, SharedPrefixResumesAtTheLastChunkBoundary) {
  Rig rig(16);
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = random_ids(rng, 150);
  const Collected a = rig.run(make_req("a", prompt, 2));
  EXPECT_EQ(a.tokens, reference(prompt, 2));
  const int64_t boundary = 150 / 64 * 64;
  EXPECT_EQ(rig.s.cache().mamba_size(), 1);
  EXPECT_EQ(rig.s.cache().total_size(), boundary);
  std::vector<int32_t> second = prompt;
  second.push_back(5);
  const int64_t before = rig.exec.extend_tokens;
  const Collected b = rig.run(make_req("b", second, 3));
  ASSERT_TRUE(b.finish.has_value());
  EXPECT_EQ(b.finish->cached_tokens, boundary);
  EXPECT_EQ(rig.exec.extend_tokens - before, static_cast<int64_t>(second.size()) - boundary);
  EXPECT_EQ(b.tokens, reference(second, 3));
  expect_all_free(rig.s, rig.exec);
}

// docs/design/hybrid_radix_cache.md's example, requests 1-2: a prompt shorter than one chunk stores no snapshot and nothing is reused.
TEST(HybridScheduler, PromptShorterThanAChunkCachesNothing) {
  Rig rig(1);
  std::mt19937 rng(12);
  const std::vector<int32_t> prompt = random_ids(rng, 50);
  rig.run(make_req("a", prompt, 3));
  EXPECT_EQ(rig.s.cache().mamba_size(), 0);
  EXPECT_EQ(rig.s.cache().total_size(), 0);
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {1, 2, 3, 4});
  const Collected b = rig.run(make_req("b", longer, 3));
  ASSERT_TRUE(b.finish.has_value());
  EXPECT_EQ(b.finish->cached_tokens, 0);
  EXPECT_EQ(b.tokens, reference(longer, 3));
  expect_all_free(rig.s, rig.exec);
}

// Copy-on-write: a request that resumes from a cached snapshot and runs on (prefill in chunks,
// decode past further boundaries) never writes the cached snapshot; a later request resumes from
// it unchanged.
TEST(HybridScheduler, ContinuingRequestNeverChangesACachedSnapshot) {
  Rig rig(1, /*chunked_prefill=*/40);
  std::mt19937 rng(13);
  const std::vector<int32_t> system = random_ids(rng, 128);
  rig.run(make_req("a", system, 1));
  ASSERT_EQ(rig.exec.last_snapshot.count(128), 1u);
  const int32_t cached = rig.exec.last_snapshot.at(128);
  const State kept = rig.exec.read(cached);
  EXPECT_EQ(kept, state_of(system));
  std::vector<int32_t> b_prompt = system;
  const auto tail = random_ids(rng, 70);
  b_prompt.insert(b_prompt.end(), tail.begin(), tail.end());
  auto b = make_req("b", b_prompt, 80);  // runs to 278: snapshots at 192 and 256
  ASSERT_TRUE(rig.s.submit(b).is_ok());
  while (rig.s.has_work()) {
    step_checked(rig.s);
    ASSERT_EQ(rig.exec.read(cached), kept) << "a running request wrote the cached snapshot";
  }
  const Collected cb = drain(*b->stream);
  ASSERT_TRUE(cb.finish.has_value());
  EXPECT_EQ(cb.finish->cached_tokens, 128);
  EXPECT_EQ(cb.tokens, reference(b_prompt, 80));
  EXPECT_EQ(rig.exec.last_snapshot.count(256), 1u);
  std::vector<int32_t> c_prompt = system;
  c_prompt.push_back(7);
  const Collected cc = rig.run(make_req("c", c_prompt, 4));
  ASSERT_TRUE(cc.finish.has_value());
  EXPECT_EQ(cc.finish->cached_tokens, 128);
  EXPECT_EQ(cc.tokens, reference(c_prompt, 4));
  expect_all_free(rig.s, rig.exec);
}

// A request that matches KV past its resume point snapshots the branching point (the last chunk
// boundary the KV match reaches), so the next request resumes there.
TEST(HybridScheduler, BranchingPointSnapshotRepairsATombstonedPath) {
  Rig rig(1);
  std::mt19937 rng(14);
  const std::vector<int32_t> p = random_ids(rng, 200);
  // a caches [0, 192) with one snapshot at 192; b forks at 150, which splits [0, 192) at 150:
  // [0, 150) has KV but no state, so b resumes at 0 and snapshots 128 (its branching point)
  // rather than 192 (the last boundary of its own prompt).
  rig.run(make_req("a", p, 1));
  std::vector<int32_t> b_prompt(p.begin(), p.begin() + 150);
  const auto tail = random_ids(rng, 60);
  b_prompt.insert(b_prompt.end(), tail.begin(), tail.end());
  const Collected b = rig.run(make_req("b", b_prompt, 2));
  ASSERT_TRUE(b.finish.has_value());
  EXPECT_EQ(b.finish->cached_tokens, 0);
  EXPECT_EQ(b.tokens, reference(b_prompt, 2));
  std::vector<int32_t> c_prompt(p.begin(), p.begin() + 140);
  c_prompt.push_back(9);
  const Collected c = rig.run(make_req("c", c_prompt, 2));
  ASSERT_TRUE(c.finish.has_value());
  EXPECT_EQ(c.finish->cached_tokens, 128);
  EXPECT_EQ(c.tokens, reference(c_prompt, 2));
  expect_all_free(rig.s, rig.exec);
}

}  // namespace
}  // namespace rlm
