// Boundary checks shared by every ops:: file: every message starts with
// "ops::<op>: <name> <tensor>" so a failing call names the offending argument.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "core/tensor.h"

namespace rlm::ops::detail {

class OpChecker {
 public:
  explicit OpChecker(const char* op) : op_(op) {}

  [[noreturn]] void fail_with(const std::string& message) const { fail(str("ops::", op_, ": ", message)); }
  [[noreturn]] void not_built(Device device) const {
    fail_with(str("not built for ", device.to_string(), " (only the CPU kernels are compiled in)"));
  }
  void defined(const char* name, const Tensor& t) const {
    if (!t.defined()) fail_with(str(name, " is an undefined tensor"));
  }
  void dtype(const char* name, const Tensor& t, std::initializer_list<DType> allowed) const {
    defined(name, t);
    for (DType d : allowed) {
      if (t.dtype() == d) return;
    }
    std::string names;
    for (DType d : allowed) names += std::string(names.empty() ? "" : " or ") + dtype_name(d);
    fail_with(str(name, " ", t.describe(), " must have dtype ", names));
  }
  void dims(const char* name, const Tensor& t, int64_t n, const char* layout) const {
    defined(name, t);
    if (t.dim() != n) fail_with(str(name, " ", t.describe(), " must be ", n, "-D ", layout));
  }
  void size(const char* name, const Tensor& t, int64_t d, int64_t expected, const char* what) const {
    if (t.size(d) != expected) {
      fail_with(str(name, " ", t.describe(), ": dimension ", d, " must be ", what, " = ", expected));
    }
  }
  void unit_last_stride(const char* name, const Tensor& t) const {
    if (t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1) {
      fail_with(str(name, " ", t.describe(), " needs a unit stride in its last dimension (strides ",
                    shape_to_string(t.strides()), ")"));
    }
  }
  void contiguous(const char* name, const Tensor& t) const {
    if (!t.is_contiguous()) fail_with(str(name, " ", t.describe(), " must be contiguous"));
  }
  void same_device(const Tensor& ref, const char* name, const Tensor& t) const {
    if (t.device() != ref.device()) {
      fail_with(str(name, " ", t.describe(), " is not on the same device as the other inputs (",
                    ref.device().to_string(), ")"));
    }
  }
  void same_shape(const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) const {
    if (t.shape() != ref.shape()) {
      fail_with(str(name, " ", t.describe(), " must have the shape of ", ref_name, " ", ref.describe()));
    }
  }

 private:
  const char* op_;
};

// Element stride of dimension d that tolerates size-1 dimensions (any stride is fine then).
inline int64_t stride_or(const Tensor& t, int64_t d, int64_t fallback) {
  return t.size(d) > 1 ? t.stride(d) : fallback;
}

// True when the byte ranges spanned by two tensors on the same device intersect (empty tensors
// never overlap).
inline bool memory_overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.device() != b.device()) return false;
  auto span = [](const Tensor& t) {
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const char* begin = static_cast<const char*>(t.data_ptr());
    return std::pair<const char*, const char*>(begin, begin + (last + 1) * static_cast<int64_t>(t.element_size()));
  };
  const auto [a0, a1] = span(a);
  const auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace rlm::ops::detail
