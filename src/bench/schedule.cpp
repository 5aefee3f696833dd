#include "bench/schedule.h"

#include <cmath>

#include "bench/rng.h"

namespace rlm::bench {

StatusOr<std::vector<double>> arrival_times(int64_t num_requests, double request_rate,
                                            double burstiness, uint64_t seed) {
  if (num_requests < 0) return invalid_argument(str("negative request count ", num_requests));
  if (!(request_rate > 0.0)) {
    return invalid_argument(str("--request-rate must be > 0 (or inf), got ", request_rate));
  }
  if (!(burstiness > 0.0) || std::isinf(burstiness)) {
    return invalid_argument(str("--burstiness must be a positive finite number, got ", burstiness));
  }
  std::vector<double> times(static_cast<size_t>(num_requests), 0.0);
  if (std::isinf(request_rate)) return times;
  // A separate stream from the dataset's (seed + a constant) so that changing the rate does not
  // change the prompts.
  Rng rng(seed ^ 0x9e3779b97f4a7c15ULL);
  double t = 0.0;
  for (size_t i = 1; i < times.size(); ++i) {
    t += burstiness == 1.0 ? rng.exponential(request_rate)
                           : rng.gamma(burstiness, 1.0 / (request_rate * burstiness));
    times[i] = t;
  }
  return times;
}

}  // namespace rlm::bench
