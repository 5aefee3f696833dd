#include "dist/cpu_communicator.h"

#include <cstring>

#include "core/dtype.h"

namespace rlm {

namespace {

void check_host_tensor(const char* op, const Tensor& t) {
  RLM_CHECK(t.device().is_cpu() && t.is_contiguous())
      << op << ": the CPU communicator takes contiguous host tensors, got " << t.describe();
}

}  // namespace

void CpuCommunicator::all_reduce_sum(const Tensor& t) {
  check_host_tensor("all_reduce_sum", t);
  RLM_CHECK(is_floating(t.dtype())) << "all_reduce_sum: f32/bf16/f16 only, got " << t.describe();
  if (size() == 1) return;
  const size_t n = static_cast<size_t>(t.numel()), bytes = t.nbytes();
  if (rank() != 0) {
    group_.send(0, t.data_ptr(), bytes);
    group_.recv(0, t.data_ptr(), bytes);
    return;
  }
  // Fixed order: rank 0's values, then rank 1's, ... each added in f32.
  sum_.resize(n);
  convert_to_f32(t.data_ptr(), t.dtype(), sum_.data(), n);
  std::vector<float> part(t.dtype() == DType::kF32 ? 0 : n);
  scratch_.resize(bytes);
  for (int r = 1; r < size(); ++r) {
    group_.recv(r, scratch_.data(), bytes);
    const float* v = reinterpret_cast<const float*>(scratch_.data());
    if (t.dtype() != DType::kF32) {
      convert_to_f32(scratch_.data(), t.dtype(), part.data(), n);
      v = part.data();
    }
    for (size_t i = 0; i < n; ++i) sum_[i] += v[i];
  }
  convert_from_f32(sum_.data(), t.data_ptr(), t.dtype(), n);
  for (int r = 1; r < size(); ++r) group_.send(r, t.data_ptr(), bytes);
}

void CpuCommunicator::all_gather(const Tensor& in, const Tensor& out) {
  check_host_tensor("all_gather", in);
  check_host_tensor("all_gather", out);
  RLM_CHECK(in.dtype() == out.dtype() && out.nbytes() == in.nbytes() * static_cast<size_t>(size()))
      << "all_gather: out " << out.describe() << " must hold " << size() << " x " << in.describe();
  const size_t bytes = in.nbytes();
  char* dst = static_cast<char*>(out.data_ptr());
  if (rank() != 0) {
    group_.send(0, in.data_ptr(), bytes);
    group_.recv(0, dst, bytes * static_cast<size_t>(size()));
    return;
  }
  std::memcpy(dst, in.data_ptr(), bytes);
  for (int r = 1; r < size(); ++r) group_.recv(r, dst + bytes * static_cast<size_t>(r), bytes);
  for (int r = 1; r < size(); ++r) group_.send(r, dst, bytes * static_cast<size_t>(size()));
}

}  // namespace rlm
