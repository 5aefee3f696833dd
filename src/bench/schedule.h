// Arrival schedule of the benchmark's requests (SGLang/vLLM bench_serving semantics): the first
// request is sent at t = 0 and each following one after a random gap. With burstiness 1 the gaps
// are exponential with mean 1/request_rate (a Poisson process); otherwise they are
// Gamma(shape = burstiness, scale = 1 / (request_rate * burstiness)), which keeps the mean and
// makes traffic burstier (< 1) or more regular (> 1), as vLLM's --burstiness. An infinite rate
// sends everything at t = 0.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace rlm::bench {

// Offsets in seconds from the start of the benchmark, non-decreasing, first one 0.
StatusOr<std::vector<double>> arrival_times(int64_t num_requests, double request_rate,
                                            double burstiness, uint64_t seed);

}  // namespace rlm::bench
