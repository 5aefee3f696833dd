// Dataset generators and the arrival schedule of `radixlm bench serve`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "bench/dataset.h"
#include "bench/schedule.h"

namespace rlm::bench {
namespace {

int64_t count_words(const std::string& text) {
  std::istringstream in(text);
  std::string w;
  int64_t n = 0;
  while (in >> w) ++n;
  return n;
}

TEST(BenchDataset, RandomLengthsWithinRangeRatio) {
  for (double ratio : {0.0, 0.25, 0.5, 1.0}) {
    DatasetOptions o;
    o.num_prompts = 2000;
    o.random_input_len = 64;
    o.random_output_len = 20;
    o.random_range_ratio = ratio;
    auto ds = build_dataset(o);
    ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
    ASSERT_EQ(ds->size(), 2000u);
    const int64_t in_lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(64 * ratio)));
    const int64_t out_lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(20 * ratio)));
    std::set<int64_t> in_seen, out_seen;
    for (const Conversation& c : *ds) {
      ASSERT_EQ(c.turns.size(), 1u);
      const Turn& t = c.turns[0];
      EXPECT_EQ(static_cast<int64_t>(t.prompt.ids.size()), t.prompt.len);
      EXPECT_TRUE(t.prompt.text.empty());
      EXPECT_GE(t.prompt.len, in_lo);
      EXPECT_LE(t.prompt.len, 64);
      EXPECT_GE(t.output_len, out_lo);
      EXPECT_LE(t.output_len, 20);
      for (int32_t id : t.prompt.ids) {
        ASSERT_GE(id, o.token_id_low);
        ASSERT_LT(id, o.token_id_high);
      }
      in_seen.insert(t.prompt.len);
      out_seen.insert(t.output_len);
    }
    // With 2000 draws every length of the (at most 64-wide) range shows up.
    EXPECT_EQ(static_cast<int64_t>(in_seen.size()), 64 - in_lo + 1) << "ratio " << ratio;
    EXPECT_EQ(static_cast<int64_t>(out_seen.size()), 20 - out_lo + 1) << "ratio " << ratio;
  }
}

TEST(BenchDataset, RangeHelper) {
  using Range = std::pair<int64_t, int64_t>;
  EXPECT_EQ(random_len_range(100, 0.0), Range(1, 100));
  EXPECT_EQ(random_len_range(100, 0.55), Range(55, 100));
  EXPECT_EQ(random_len_range(100, 1.0), Range(100, 100));
  EXPECT_EQ(random_len_range(1, 0.3), Range(1, 1));
}

TEST(BenchDataset, DeterministicBySeed) {
  DatasetOptions o;
  o.num_prompts = 50;
  o.random_input_len = 30;
  o.random_output_len = 10;
  auto a = build_dataset(o), b = build_dataset(o);
  o.seed = 2;
  auto c = build_dataset(o);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  bool any_diff = false;
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].turns[0].prompt.ids, (*b)[i].turns[0].prompt.ids);
    EXPECT_EQ((*a)[i].turns[0].output_len, (*b)[i].turns[0].output_len);
    any_diff = any_diff || (*a)[i].turns[0].prompt.ids != (*c)[i].turns[0].prompt.ids;
  }
  EXPECT_TRUE(any_diff);
}

TEST(BenchDataset, TextPromptsUseTheWordList) {
  DatasetOptions o;
  o.format = PromptFormat::kText;
  o.num_prompts = 20;
  o.random_input_len = 40;
  o.random_output_len = 5;
  o.random_range_ratio = 0.5;
  auto ds = build_dataset(o);
  ASSERT_TRUE(ds.is_ok());
  const auto& words = prompt_words();
  std::set<std::string> vocab(words.begin(), words.end());
  EXPECT_EQ(vocab.size(), words.size()) << "duplicate words in the list";
  for (const Conversation& c : *ds) {
    const Prompt& p = c.turns[0].prompt;
    EXPECT_TRUE(p.ids.empty());
    EXPECT_EQ(count_words(p.text), p.len);
    ASSERT_FALSE(p.text.empty());
    EXPECT_EQ(p.text.front(), ' ');
    std::istringstream in(p.text);
    std::string w;
    while (in >> w) EXPECT_TRUE(vocab.count(w)) << w;
  }
}

TEST(BenchDataset, GeneratedSharedPrefixStructure) {
  DatasetOptions o;
  o.kind = DatasetKind::kGeneratedSharedPrefix;
  o.gsp_num_groups = 4;
  o.gsp_prompts_per_group = 5;
  o.gsp_system_prompt_len = 32;
  o.gsp_question_len = 8;
  o.gsp_output_len = 7;
  auto ds = build_dataset(o);
  ASSERT_TRUE(ds.is_ok());
  ASSERT_EQ(ds->size(), 20u);
  std::map<int64_t, std::vector<std::vector<int32_t>>> by_group;
  std::vector<int64_t> order;
  for (const Conversation& c : *ds) {
    ASSERT_EQ(c.turns.size(), 1u);
    EXPECT_EQ(c.turns[0].output_len, 7);
    EXPECT_EQ(c.turns[0].prompt.len, 40);
    ASSERT_EQ(c.turns[0].prompt.ids.size(), 40u);
    by_group[c.group].push_back(c.turns[0].prompt.ids);
    order.push_back(c.group);
  }
  ASSERT_EQ(by_group.size(), 4u);
  std::set<std::vector<int32_t>> prefixes;
  for (auto& [g, prompts] : by_group) {
    ASSERT_EQ(prompts.size(), 5u);
    std::vector<int32_t> prefix(prompts[0].begin(), prompts[0].begin() + 32);
    std::set<std::vector<int32_t>> questions;
    for (const auto& p : prompts) {
      EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), p.begin())) << "group " << g;
      questions.insert(std::vector<int32_t>(p.begin() + 32, p.end()));
    }
    EXPECT_EQ(questions.size(), 5u) << "questions of group " << g << " must differ";
    prefixes.insert(prefix);
  }
  EXPECT_EQ(prefixes.size(), 4u) << "groups must have different system prompts";
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end())) << "prompts are shuffled";
}

TEST(BenchDataset, MultiTurn) {
  DatasetOptions o;
  o.kind = DatasetKind::kMultiTurn;
  o.format = PromptFormat::kText;
  o.num_prompts = 6;
  o.multi_turn_num_turns = 4;
  o.random_input_len = 10;
  o.random_output_len = 3;
  o.random_range_ratio = 1.0;
  auto ds = build_dataset(o);
  ASSERT_TRUE(ds.is_ok());
  ASSERT_EQ(ds->size(), 6u);
  for (const Conversation& c : *ds) {
    ASSERT_EQ(c.turns.size(), 4u);
    for (const Turn& t : c.turns) {
      EXPECT_EQ(t.prompt.len, 10);
      EXPECT_EQ(count_words(t.prompt.text), 10);
      EXPECT_EQ(t.output_len, 3);
    }
  }
  o.format = PromptFormat::kTokenIds;
  EXPECT_EQ(build_dataset(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(BenchDataset, RejectsBadOptions) {
  DatasetOptions o;
  o.num_prompts = 0;
  EXPECT_NE(build_dataset(o).status().message().find("--num-prompts"), std::string::npos);
  o = DatasetOptions();
  o.random_range_ratio = 1.5;
  EXPECT_NE(build_dataset(o).status().message().find("--random-range-ratio"), std::string::npos);
  o = DatasetOptions();
  o.token_id_high = o.token_id_low;
  EXPECT_FALSE(build_dataset(o).is_ok());
  o = DatasetOptions();
  o.kind = DatasetKind::kGeneratedSharedPrefix;
  o.gsp_question_len = 0;
  EXPECT_NE(build_dataset(o).status().message().find("--gsp-question-len"), std::string::npos);
  EXPECT_FALSE(parse_dataset_kind("sharegpt").is_ok());
}

// Inter-arrival gaps of a Poisson process are exponential with mean 1/rate and standard
// deviation 1/rate, so the sample mean of n gaps has standard error (1/rate)/sqrt(n); we accept
// 5 standard errors. The fraction of gaps longer than the mean is exp(-1) for an exponential;
// its binomial standard error is sqrt(p(1-p)/n), again 5 of them allowed.
TEST(BenchSchedule, PoissonInterArrivalMean) {
  const int64_t n = 20001;
  for (double rate : {0.5, 4.0, 100.0}) {
    for (uint64_t seed : {1u, 7u, 12345u}) {
      auto t = arrival_times(n, rate, 1.0, seed);
      ASSERT_TRUE(t.is_ok());
      ASSERT_EQ(static_cast<int64_t>(t->size()), n);
      EXPECT_EQ((*t)[0], 0.0);
      const double mean_gap = 1.0 / rate;
      double sum = 0, sq = 0;
      int64_t longer = 0;
      for (int64_t i = 1; i < n; ++i) {
        const double g = (*t)[i] - (*t)[i - 1];
        ASSERT_GE(g, 0.0);
        sum += g;
        sq += g * g;
        longer += g > mean_gap;
      }
      const double m = static_cast<double>(n - 1);
      const double mean = sum / m;
      EXPECT_NEAR(mean, mean_gap, 5 * mean_gap / std::sqrt(m)) << "rate " << rate << " seed " << seed;
      const double sd = std::sqrt(sq / m - mean * mean);
      EXPECT_NEAR(sd / mean, 1.0, 0.05) << "exponential gaps have CV 1";
      const double p = std::exp(-1.0);
      EXPECT_NEAR(longer / m, p, 5 * std::sqrt(p * (1 - p) / m));
    }
  }
}

TEST(BenchSchedule, BurstinessKeepsTheMean) {
  const int64_t n = 20001;
  const double rate = 10.0;
  for (double burst : {0.25, 4.0}) {
    auto t = arrival_times(n, rate, burst, 3);
    ASSERT_TRUE(t.is_ok());
    double sum = 0, sq = 0;
    for (int64_t i = 1; i < n; ++i) {
      const double g = (*t)[i] - (*t)[i - 1];
      sum += g;
      sq += g * g;
    }
    const double m = static_cast<double>(n - 1);
    const double mean = sum / m;
    const double cv = std::sqrt(sq / m - mean * mean) / mean;
    // Gamma(k, theta): mean k*theta = 1/rate, CV 1/sqrt(k); std error of the mean = CV*mean/sqrt(n).
    EXPECT_NEAR(mean, 1.0 / rate, 5 * (1.0 / rate) / std::sqrt(burst) / std::sqrt(m));
    EXPECT_NEAR(cv, 1.0 / std::sqrt(burst), 0.1 / std::sqrt(burst));
  }
}

TEST(BenchSchedule, InfiniteRateAndDeterminism) {
  auto t = arrival_times(10, INFINITY, 1.0, 1);
  ASSERT_TRUE(t.is_ok());
  for (double v : *t) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(arrival_times(100, 3.0, 1.0, 9).value(), arrival_times(100, 3.0, 1.0, 9).value());
  EXPECT_NE(arrival_times(100, 3.0, 1.0, 9).value(), arrival_times(100, 3.0, 1.0, 10).value());
  EXPECT_FALSE(arrival_times(10, 0.0, 1.0, 1).is_ok());
  EXPECT_FALSE(arrival_times(10, -2.0, 1.0, 1).is_ok());
  EXPECT_FALSE(arrival_times(10, 1.0, 0.0, 1).is_ok());
}

}  // namespace
}  // namespace rlm::bench
