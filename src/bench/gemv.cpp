#include "bench/gemv.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_timing.h"
#include "core/device.h"
#include "core/tensor.h"
#include "formats/gguf_dequant.h"
#include "ops/ops.h"

#ifdef RADIXLM_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/quant_matmul.h"
#include "ops/fp8_cuda_weight.h"
#endif

namespace rlm::bench {

#ifdef RADIXLM_WITH_CUDA

namespace {

struct Shape2 {
  const char* name;
  int64_t n, k;
  int64_t per_step;  // uses per decode step
};

}  // namespace

int run_gemv(const GemvArgs& a) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "radixlm bench gemv: no CUDA device\n");
    return 2;
  }
  StatusOr<DType> parsed = parse_dtype(a.dtype);
  if (!parsed.is_ok() || !(*parsed == DType::kBF16 || *parsed == DType::kF16 || *parsed == DType::kF8E4M3 ||
                           is_quantized(*parsed))) {
    std::fprintf(
        stderr,
        "radixlm bench gemv: --dtype must be bf16, f16, fp8_e4m3 or a GGUF block type (q4_k, ...), got %s\n",
        a.dtype.c_str());
    return 2;
  }
  const DType dtype = *parsed;
  const bool quantized = is_quantized(dtype);
  const bool fp8 = dtype == DType::kF8E4M3;
  for (int64_t m : a.ms) {
    if (m < 1) {
      std::fprintf(stderr, "radixlm bench gemv: --m values must be >= 1, got %lld\n", static_cast<long long>(m));
      return 2;
    }
  }
  cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const auto stream = static_cast<cudaStream_t>(cuda_stream(0));
  const bool was_enabled = cuda::linear_gemv_enabled();
  const bool pairs_were_enabled = cuda::quant_gemv_pairs_enabled();
  // The second kernel timed: cuBLAS for 16-bit weights, the one-group quantized GEMV for Q4_K /
  // Q5_K; none for FP8 weights (fp8_linear's own path: the tensor-core GEMV up to 8 rows, cuBLASLt
  // above).
  const bool has_alt = !fp8 && (!quantized || dtype == DType::kQ4_K || dtype == DType::kQ5_K);
  const char* alt_name = quantized ? "1group" : fp8 ? "none" : "cublas";
  const std::vector<Shape2> shapes = {{"qkv", 6144, 4096, a.layers},
                                      {"o", 4096, 4096, a.layers},
                                      {"gate_up", 28672, 4096, a.layers},
                                      {"down", 4096, 14336, a.layers},
                                      {"lm_head", 128256, 4096, 1}};
  std::mt19937 rng(1234);
  nlohmann::json j;
  j["device"] = prop.name;
  j["sm_count"] = prop.multiProcessorCount;
  j["dtype"] = a.dtype;
  std::printf("device %s (%d SMs, L2 %d MiB); %s weights, f32 x/out; ratio = GB/s / copy GB/s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, dtype_name(dtype));
  for (int64_t m : a.ms) {
    std::printf("m = %lld\n  %-8s %7s %6s %4s %9s %9s %9s %8s_us %7s %7s_r %9s %8s\n",
                static_cast<long long>(m), "linear", "n", "k", "cps", "copy_us", "copy_GBs", "gemv_us",
                alt_name, "gemv_r", alt_name, "gemv_path", "speedup");
    double step_gemv = 0, step_cublas = 0, step_copy = 0, step_bytes = 0;
    for (const Shape2& s : shapes) {
      const size_t bytes = dtype_nbytes(dtype, s.n * s.k);
      const int64_t copies = std::max<int64_t>(1, static_cast<int64_t>((size_t{256} << 20) / bytes) + 1);
      // One random weight uploaded, then copied on the device (uploads of 1 GB each would be slow).
      std::vector<Tensor> w;
      if (quantized) {
        Tensor host = Tensor::empty({s.n, s.k}, dtype);
        fill_random_blocks(dtype, host.data_ptr(), s.n * s.k / dtype_block_size(dtype), rng(), 0.02f);
        w.push_back(host.to(Device::cuda(0)));
      } else {
        w.push_back(random_gpu(rng, {s.n, s.k}, dtype));
      }
      // FP8: per-output-channel scales, dynamic per-token activation scales (--quantization fp8).
      ops::Fp8Scales scales;
      if (fp8) {
        Tensor sw = Tensor::empty({s.n}, DType::kF32);
        std::uniform_real_distribution<float> u(1e-3f, 2e-2f);
        for (int64_t j = 0; j < s.n; ++j) sw.data<float>()[j] = u(rng);
        scales.weight_scale = sw.to(Device::cuda(0));
      }
      for (int64_t c = 1; c < copies; ++c) w.push_back(w[0].clone());
      const Tensor x = random_gpu(rng, {m, s.k}, DType::kF32);
      const Tensor out = Tensor::empty({m, s.n}, DType::kF32, Device::cuda(0));
      const Tensor dst = Tensor::empty({s.n, s.k}, dtype, Device::cuda(0));
      const double t_copy = median_seconds(a.iters, 2, stream, [&] {
                              for (const Tensor& wc : w) {
                                cuda_ok(cudaMemcpyAsync(dst.data_ptr(), wc.data_ptr(), bytes,
                                                        cudaMemcpyDeviceToDevice, stream),
                                        "cudaMemcpyAsync");
                              }
                            }) /
                            static_cast<double>(copies);
      auto time_linear = [&](bool first) {
        if (quantized) {
          cuda::set_quant_gemv_pairs_enabled(first);
        } else if (!fp8) {
          cuda::set_linear_gemv_enabled(first);
        }
        auto run_all = [&] {
          for (const Tensor& wc : w) {
            if (fp8) {
              ops::linear(x, wc, std::nullopt, out, scales);
            } else {
              ops::linear(x, wc, std::nullopt, out);
            }
          }
        };
        const double t = median_seconds(a.iters, 2, stream, run_all) / static_cast<double>(copies);
        cuda::set_linear_gemv_enabled(was_enabled);
        cuda::set_quant_gemv_pairs_enabled(pairs_were_enabled);
        return t;
      };
      const double t_gemv = time_linear(true);
      const double t_cublas = has_alt ? time_linear(false) : std::nan("");
      const double gb = static_cast<double>(bytes) / 1e9;
      const double copy_gbs = 2.0 * gb / t_copy, gemv_gbs = gb / t_gemv, cublas_gbs = gb / t_cublas;
      const char* path = fp8         ? cuda::fp8_linear_path(0, m, ops::cuda_fp8_weight(w[0], scales))
                         : quantized ? (m <= cuda::kQuantGemvMaxRows ? "qgemv" : "dequant")
                         : cuda::linear_uses_gemv(0, m, s.k, w[0].data_ptr(), dtype, s.k) ? "gemv"
                                                                                          : "cublas";
      std::printf("  %-8s %7lld %6lld %4lld %9.2f %9.0f %9.2f %11.2f %7.3f %9.3f %9s %8.3f\n", s.name,
                  static_cast<long long>(s.n), static_cast<long long>(s.k), static_cast<long long>(copies),
                  t_copy * 1e6, copy_gbs, t_gemv * 1e6, t_cublas * 1e6, gemv_gbs / copy_gbs,
                  cublas_gbs / copy_gbs, path, t_cublas / t_gemv);
      step_gemv += t_gemv * static_cast<double>(s.per_step);
      step_cublas += t_cublas * static_cast<double>(s.per_step);
      step_copy += t_copy * static_cast<double>(s.per_step);
      step_bytes += gb * static_cast<double>(s.per_step);
      nlohmann::json row{{"m", m},
                         {"name", s.name},
                         {"n", s.n},
                         {"k", s.k},
                         {"copies", copies},
                         {"copy_us", t_copy * 1e6},
                         {"copy_gbs", copy_gbs},
                         {"gemv_us", t_gemv * 1e6},
                         {std::string(alt_name) + "_us", t_cublas * 1e6},
                         {"gemv_ratio_to_copy", gemv_gbs / copy_gbs},
                         {std::string(alt_name) + "_ratio_to_copy", cublas_gbs / copy_gbs}};
      j["runs"].push_back(row);
    }
    // Floor: the step's weight bytes read at the copy's rate (read + write counted, so bytes / (copy GB/s)).
    const double floor_s = step_bytes / (2.0 * step_bytes / step_copy);
    std::printf(
        "  step (%lld layers + lm_head, %.2f GB of weights): gemv %.3f ms, %s %.3f ms, weight-read floor "
        "at copy speed %.3f ms (gemv %.3fx, %s %.3fx of it)\n",
        static_cast<long long>(a.layers), step_bytes, step_gemv * 1e3, alt_name, step_cublas * 1e3,
        floor_s * 1e3, step_gemv / floor_s, alt_name, step_cublas / floor_s);
    j["steps"].push_back({{"m", m},
                          {"weight_gb", step_bytes},
                          {"gemv_ms", step_gemv * 1e3},
                          {std::string(alt_name) + "_ms", step_cublas * 1e3},
                          {"floor_ms", floor_s * 1e3}});
  }
  return finish_report(j, a.json_path, "bench gemv");
}

#else

int run_gemv(const GemvArgs&) {
  std::fprintf(stderr, "radixlm bench gemv: this binary was built without CUDA\n");
  return 2;
}

#endif

}  // namespace rlm::bench
