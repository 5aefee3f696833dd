#include "ops/token_ops.h"

#include "kernels/cpu/token_table.h"
#ifdef RADIXLM_WITH_CUDA
#include "kernels/cuda/token_table.h"
#endif

namespace rlm::ops {

namespace {

void check_i32_vector(const char* op, const char* name, const Tensor& t) {
  RLM_CHECK(t.defined() && t.dtype() == DType::kI32 && t.dim() == 1 && t.is_contiguous())
      << "ops::" << op << ": " << name << " " << t.describe() << " must be a contiguous i32 vector";
}

void check_args(const char* op, const Tensor& a, const char* a_name, const Tensor& slots, const Tensor& table) {
  check_i32_vector(op, a_name, a);
  check_i32_vector(op, "slots", slots);
  check_i32_vector(op, "table", table);
  RLM_CHECK(a.numel() == slots.numel()) << "ops::" << op << ": " << a_name << " " << a.describe() << " and slots "
                                        << slots.describe() << " differ in length";
  RLM_CHECK(a.device() == slots.device() && a.device() == table.device())
      << "ops::" << op << ": tensors on different devices (" << a.describe() << ", " << slots.describe() << ", "
      << table.describe() << ")";
  if (a.device().is_cpu()) {
    for (int64_t i = 0; i < slots.numel(); ++i) {
      const int32_t s = slots.data<int32_t>()[i];
      RLM_CHECK(s >= 0 && s < table.numel()) << "ops::" << op << ": slot " << s << " at position " << i
                                             << " outside the table of " << table.numel();
    }
  }
}

}  // namespace

void scatter_tokens(const Tensor& values, const Tensor& slots, const Tensor& table) {
  check_args("scatter_tokens", values, "values", slots, table);
  const Device d = values.device();
  if (d.is_cpu()) {
    cpu::scatter_tokens(values.data<int32_t>(), slots.data<int32_t>(), values.numel(), table.data<int32_t>());
  } else {
#ifdef RADIXLM_WITH_CUDA
    cuda::scatter_tokens(d.index, values.data<int32_t>(), slots.data<int32_t>(), values.numel(), table.data<int32_t>());
#else
    fail("ops::scatter_tokens: not built for " + d.to_string());
#endif
  }
}

void resolve_future_tokens(const Tensor& ids, const Tensor& slots, const Tensor& table) {
  check_args("resolve_future_tokens", ids, "ids", slots, table);
  const Device d = ids.device();
  if (d.is_cpu()) {
    cpu::resolve_future_tokens(ids.data<int32_t>(), slots.data<int32_t>(), ids.numel(), table.data<int32_t>());
  } else {
#ifdef RADIXLM_WITH_CUDA
    cuda::resolve_future_tokens(d.index, ids.data<int32_t>(), slots.data<int32_t>(), ids.numel(),
                                table.data<int32_t>());
#else
    fail("ops::resolve_future_tokens: not built for " + d.to_string());
#endif
  }
}

void shard_token_ids(const Tensor& ids, int32_t start, int32_t count, int32_t outside, const Tensor& out) {
  check_i32_vector("shard_token_ids", "ids", ids);
  check_i32_vector("shard_token_ids", "out", out);
  RLM_CHECK(ids.numel() == out.numel() && ids.device() == out.device())
      << "ops::shard_token_ids: ids " << ids.describe() << ", out " << out.describe();
  const Device d = ids.device();
  if (d.is_cpu()) {
    cpu::shard_token_ids(ids.data<int32_t>(), ids.numel(), start, count, outside, out.data<int32_t>());
  } else {
#ifdef RADIXLM_WITH_CUDA
    cuda::shard_token_ids(d.index, ids.data<int32_t>(), ids.numel(), start, count, outside, out.data<int32_t>());
#else
    fail("ops::shard_token_ids: not built for " + d.to_string());
#endif
  }
}

}  // namespace rlm::ops
