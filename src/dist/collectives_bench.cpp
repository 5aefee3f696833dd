#include "dist/collectives_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/check.h"
#include "core/tensor.h"

namespace rlm {

namespace {

double time_calls(Communicator& comm, Device device, const Tensor& t, int iters) {
  for (int i = 0; i < 3; ++i) comm.all_reduce_sum(t);  // warm-up (NCCL sets up its channels)
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) comm.all_reduce_sum(t);
  device_synchronize(device);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  comm.barrier();
  return s / iters * 1e6;
}

}  // namespace

std::vector<AllReduceTiming> bench_all_reduce(Communicator& comm, Device device) {
  std::vector<AllReduceTiming> out;
  const double n = comm.size();
  const bool cpu = device.is_cpu();
  for (size_t bytes = size_t{8} << 10; bytes <= (size_t{128} << 20); bytes *= 4) {
    if (cpu && bytes > (size_t{8} << 20)) break;  // the TCP communicator: small sizes tell enough
    const Tensor t = Tensor::zeros({static_cast<int64_t>(bytes / 2)}, DType::kBF16, device);
    const int iters = bytes <= (size_t{1} << 20) ? 200 : bytes <= (size_t{16} << 20) ? 50 : 10;
    std::vector<std::pair<std::string, AllReduceMode>> algos = {
        {cpu ? "tcp" : "nccl", AllReduceMode::kLibrary}};
    if (bytes <= comm.one_shot_max_bytes()) algos.push_back({"one-shot", AllReduceMode::kOneShot});
    for (const auto& [name, mode] : algos) {
      comm.set_all_reduce_mode(mode);
      AllReduceTiming r;
      r.bytes = bytes;
      r.algo = name;
      r.us = time_calls(comm, device, t, iters);
      r.bus_gbps = static_cast<double>(bytes) / (r.us * 1e-6) * 2.0 * (n - 1.0) / n / 1e9;
      out.push_back(r);
    }
    comm.set_all_reduce_mode(AllReduceMode::kAuto);
  }
  return out;
}

std::string format_all_reduce_timings(const std::vector<AllReduceTiming>& t, int ranks) {
  std::string s = str("all-reduce over ", ranks,
                      " ranks (bf16, eager back-to-back calls; bus bandwidth = bytes / time * "
                      "2(n-1)/n):\n");
  for (const AllReduceTiming& r : t) {
    char line[160];
    const double kb = static_cast<double>(r.bytes) / 1024.0;
    std::snprintf(line, sizeof line, "  %10.0f KB  %-8s %9.1f us  %8.1f GB/s bus\n", kb, r.algo.c_str(), r.us,
                  r.bus_gbps);
    s += line;
  }
  return s;
}

}  // namespace rlm
