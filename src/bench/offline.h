// `radixlm bench offline`: in-process throughput (no HTTP) — every request of a dataset of random
// token prompts is handed to the OfflineEngine (the serving scheduler and engine) at once and run
// until all finish; the report gives request, input, output and total token throughput (SGLang's
// bench_offline_throughput definitions). `dataset_out` writes the prompts and output lengths as JSON
// so that another engine (tools/hf_offline_bench.py: transformers.generate) can run exactly the
// same work.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine_args.h"

namespace rlm::bench {

struct OfflineArgs {
  int64_t num_prompts = 64;
  int64_t input_len = 512;
  int64_t output_len = 128;
  double range_ratio = 1.0;  // lengths uniform in [len * ratio, len]
  std::string dataset;       // read prompts from this JSON instead of generating them
  std::string dataset_out;   // write the generated prompts here
  std::string result_out;    // write the result JSON here
};

// The model, device, KV and scheduler settings come from `engine` (its context length defaults to
// the longest request; its seed also draws the prompts). Returns the process exit code.
int run_offline(const EngineArgs& engine, const OfflineArgs& args);

}  // namespace rlm::bench
