#include "bench/grammar.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "grammar/grammar.h"
#include "ops/sampling_ops.h"
#include "tokenizer/tokenizer.h"

namespace rlm::bench {

namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

}  // namespace

int run_grammar(const GrammarBenchArgs& args) {
  auto tok = load_tokenizer(args.tokenizer);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "bench grammar: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::ifstream in(args.schemas);
  if (!in) {
    std::fprintf(stderr, "bench grammar: cannot read %s\n", args.schemas.c_str());
    return 1;
  }
  std::vector<std::string> schemas;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) schemas.push_back(line);
  }
  const int64_t vocab = (*tok)->vocab_size();
  std::vector<int32_t> stop;
  if (std::optional<int32_t> eos = (*tok)->eos_id()) stop.push_back(*eos);
  auto t0 = Clock::now();
  grammar::GrammarCompiler compiler(**tok, vocab, stop);
  const double vocab_ms = micros(t0, Clock::now()) / 1000.0;

  std::ofstream walks;
  if (!args.walks_path.empty()) walks.open(args.walks_path);
  std::mt19937_64 rng(args.seed);
  const int64_t words = grammar::bitmask_words(vocab);
  std::vector<int32_t> mask(static_cast<size_t>(words));
  std::vector<double> fill_us, accept_us, compile_ms;
  int64_t finished = 0;
  for (const std::string& schema : schemas) {
    t0 = Clock::now();
    auto g = compiler.compile({grammar::GrammarKind::kJsonSchema, schema, true});
    compile_ms.push_back(micros(t0, Clock::now()) / 1000.0);
    if (!g.is_ok()) {
      std::fprintf(stderr, "bench grammar: %s\n", g.status().to_string().c_str());
      return 1;
    }
    grammar::GrammarMatcher m(*g);
    std::vector<int32_t> tokens;
    std::vector<int32_t> allowed;
    while (static_cast<int64_t>(tokens.size()) < args.steps && !m.terminated()) {
      t0 = Clock::now();
      m.fill_next_token_bitmask(mask.data());
      fill_us.push_back(micros(t0, Clock::now()));
      allowed.clear();
      for (int64_t t = 0; t < vocab; ++t) {
        if ((static_cast<uint32_t>(mask[t >> 5]) >> (t & 31)) & 1u) allowed.push_back(static_cast<int32_t>(t));
      }
      RLM_CHECK(!allowed.empty()) << "no token allowed by " << schema;
      const int32_t token = allowed[rng() % allowed.size()];
      t0 = Clock::now();
      RLM_CHECK(m.accept(token)) << "allowed token " << token << " refused";
      accept_us.push_back(micros(t0, Clock::now()));
      tokens.push_back(token);
    }
    finished += m.terminated() ? 1 : 0;
    if (walks) walks << nlohmann::json{{"schema", schema}, {"tokens", tokens}}.dump() << "\n";
  }
  // Applying one mask row to one row of logits on the CPU (what the sampler adds per row).
  Tensor logits = Tensor::zeros({1, vocab}, DType::kF32);
  const Tensor mask_t = Tensor::from_vector(mask, {1, words});
  const Tensor rows = Tensor::from_vector(std::vector<int32_t>{0}, {1});
  std::vector<double> apply_us;
  for (int i = 0; i < 200; ++i) {
    t0 = Clock::now();
    ops::apply_token_bitmask(logits, mask_t, rows);
    apply_us.push_back(micros(t0, Clock::now()));
  }

  nlohmann::ordered_json out;
  out["tokenizer"] = args.tokenizer;
  out["vocab_size"] = vocab;
  out["stop_ids"] = stop;
  out["grammars"] = schemas.size();
  out["terminated"] = finished;
  out["tokens"] = fill_us.size();
  out["vocab_index_ms"] = vocab_ms;
  out["compile_ms_mean"] = mean(compile_ms);
  out["compile_ms_p50"] = percentile(compile_ms, 0.5);
  out["fill_us_mean"] = mean(fill_us);
  out["fill_us_p50"] = percentile(fill_us, 0.5);
  out["fill_us_p99"] = percentile(fill_us, 0.99);
  out["accept_us_mean"] = mean(accept_us);
  out["apply_cpu_us_p50"] = percentile(apply_us, 0.5);
  std::printf("bench grammar: %zu JSON schemas on %s (vocab %lld), %lld tokens, %lld walks terminated\n",
              schemas.size(), args.tokenizer.c_str(), static_cast<long long>(vocab),
              static_cast<long long>(fill_us.size()), static_cast<long long>(finished));
  std::printf("  vocabulary index %.1f ms; compile mean %.2f ms (p50 %.2f)\n", vocab_ms, mean(compile_ms),
              percentile(compile_ms, 0.5));
  std::printf("  mask fill per token: mean %.2f us, p50 %.2f us, p99 %.2f us; accept mean %.2f us\n", mean(fill_us),
              percentile(fill_us, 0.5), percentile(fill_us, 0.99), mean(accept_us));
  std::printf("  mask apply to one logits row (CPU): p50 %.2f us\n", percentile(apply_us, 0.5));
  if (!args.json_path.empty()) {
    std::ofstream(args.json_path) << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace rlm::bench
