#include "core/tensor.h"

#include <cstring>
#include <sstream>

namespace rlm {

std::string shape_to_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  void* p = device_alloc(device, nbytes);
  return std::make_shared<Storage>(p, nbytes, device, [device](void* q) { device_free(device, q); });
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  // No tensor holds 2^56 elements: a larger count is a corrupt shape, whose byte count would wrap.
  constexpr int64_t kMaxElements = int64_t{1} << 56;
  int64_t n = 1;
  for (int64_t s : shape) {
    RLM_CHECK_GE(s, 0) << " negative dimension in " << shape_to_string(shape);
    RLM_CHECK(s == 0 || n <= kMaxElements / s)
        << "Tensor::empty: " << shape_to_string(shape) << " has too many elements";
    n *= s;
  }
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.storage_ = Storage::allocate(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  device_memset(t.data_ptr(), device, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_blob(void* data, Shape shape, DType dtype, Device device, std::shared_ptr<void> owner) {
  Tensor t;
  t.dtype_ = dtype;
  t.device_ = device;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device,
                                         [owner = std::move(owner)](void*) mutable { owner.reset(); });
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  RLM_CHECK(d >= 0 && d < n) << "dimension " << d << " out of range for " << describe();
  return shape_[d];
}

int64_t Tensor::stride(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  RLM_CHECK(d >= 0 && d < n) << "dimension " << d << " out of range for " << describe();
  return strides_[d];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  RLM_CHECK(defined()) << "data_ptr() on an undefined tensor";
  return static_cast<char*>(storage_->data()) + dtype_nbytes(dtype_, offset_);
}

Tensor Tensor::view(Shape shape) const {
  RLM_CHECK(defined()) << "view() on an undefined tensor";
  RLM_CHECK(is_contiguous()) << "view() needs a contiguous tensor, got " << describe() << " strides "
                             << shape_to_string(strides_);
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      RLM_CHECK(infer < 0) << "view(): more than one -1 in " << shape_to_string(shape);
      infer = static_cast<int64_t>(i);
    } else {
      RLM_CHECK_GE(shape[i], 0) << " view(): bad shape " << shape_to_string(shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    RLM_CHECK(known > 0 && numel() % known == 0)
        << "view(): cannot view " << describe() << " as " << shape_to_string(shape);
    shape[infer] = numel() / known;
  }
  RLM_CHECK_EQ(shape_numel(shape), numel()) << " view(): cannot view " << describe() << " as "
                                            << shape_to_string(shape);
  if (is_quantized(dtype_)) {
    RLM_CHECK(!shape.empty() && shape.back() % dtype_block_size(dtype_) == 0)
        << "view(): the last dimension of a " << dtype_name(dtype_) << " tensor must be a whole number of "
        << dtype_block_size(dtype_) << "-element blocks; cannot view " << describe() << " as " << shape_to_string(shape);
  }
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end) const {
  int64_t n = dim();
  if (d < 0) d += n;
  RLM_CHECK(d >= 0 && d < n) << "slice(): dimension " << d << " out of range for " << describe();
  RLM_CHECK(0 <= start && start <= end && end <= shape_[d])
      << "slice(): [" << start << ", " << end << ") out of range for dim " << d << " of " << describe();
  if (is_quantized(dtype_) && d == n - 1) {
    const int64_t bs = dtype_block_size(dtype_);
    RLM_CHECK(start % bs == 0 && end % bs == 0)
        << "slice(): [" << start << ", " << end << ") of the last dimension of " << describe()
        << " does not fall on " << bs << "-element block boundaries";
  }
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int64_t d, int64_t i) const {
  int64_t n = dim();
  if (d < 0) d += n;
  RLM_CHECK(d >= 0 && d < n) << "select(): dimension " << d << " out of range for " << describe();
  RLM_CHECK(0 <= i && i < shape_[d]) << "select(): index " << i << " out of range for dim " << d << " of "
                                     << describe();
  RLM_CHECK(!is_quantized(dtype_) || d < n - 1) << "select(): cannot take one element of the blocks of " << describe();
  Tensor t = *this;
  t.offset_ += i * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t n = dim();
  if (d0 < 0) d0 += n;
  if (d1 < 0) d1 += n;
  RLM_CHECK(d0 >= 0 && d0 < n && d1 >= 0 && d1 < n) << "transpose(): bad dims for " << describe();
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n + 1;
  RLM_CHECK(d >= 0 && d <= n) << "unsqueeze(): bad dim for " << describe();
  Tensor t = *this;
  int64_t st = d < n ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, st);
  return t;
}

namespace {

// Calls fn(dst_offset_elems, src_offset_elems) for every element of `shape` (row-major order).
template <typename Fn>
void for_each_index(const Shape& shape, const Shape& a_strides, const Shape& b_strides, Fn fn) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (shape_numel(shape) == 0) return;
  std::vector<int64_t> idx(nd, 0);
  int64_t a = 0, b = 0;
  while (true) {
    fn(a, b);
    int64_t d = nd - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        a += a_strides[d];
        b += b_strides[d];
        break;
      }
      a -= a_strides[d] * (shape[d] - 1);
      b -= b_strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace

void Tensor::copy_(const Tensor& src) const {
  RLM_CHECK(defined() && src.defined()) << "copy_() with an undefined tensor";
  RLM_CHECK(shape_ == src.shape_) << "copy_(): shape mismatch: destination " << describe() << ", source "
                                  << src.describe();
  if (dtype_ == src.dtype_ && is_contiguous() && src.is_contiguous()) {
    device_memcpy(data_ptr(), device_, src.data_ptr(), src.device_, nbytes());
    return;
  }
  // Rows of contiguous elements at a pitch (a row slice of a wider buffer, e.g. q inside a fused
  // QKV activation): one 2-D copy, on a GPU too.
  auto pitched = [](const Shape& shape, const Shape& strides) {
    if (shape.size() < 2) return false;
    int64_t expect = 1;
    for (size_t i = shape.size(); i-- > 1;) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return strides[0] >= expect;
  };
  if (dtype_ == src.dtype_ && device_ == src.device_ && pitched(shape_, strides_) && pitched(src.shape_, src.strides_)) {
    const size_t row = dtype_nbytes(dtype_, numel() / std::max<int64_t>(shape_[0], 1));
    device_memcpy_2d(data_ptr(), dtype_nbytes(dtype_, strides_[0]), src.data_ptr(), dtype_nbytes(dtype_, src.strides_[0]),
                     row, static_cast<size_t>(shape_[0]), device_);
    return;
  }
  RLM_CHECK(!is_quantized(dtype_) && !is_quantized(src.dtype_))
      << "copy_(): block-quantized tensors copy only whole rows of blocks between equal dtypes (dequantize with "
         "formats/gguf_dequant.h); got "
      << describe() << " <- " << src.describe();
  RLM_CHECK(device_.is_cpu() && src.device_.is_cpu())
      << "copy_(): strided or converting copies are CPU-only (besides row-pitched ones); got " << describe()
      << " <- " << src.describe();
  const size_t dsz = dtype_size(dtype_), ssz = dtype_size(src.dtype_);
  char* dbase = static_cast<char*>(data_ptr());
  const char* sbase = static_cast<const char*>(src.data_ptr());
  if (dtype_ == src.dtype_) {
    for_each_index(shape_, strides_, src.strides_, [&](int64_t a, int64_t b) {
      std::memcpy(dbase + a * dsz, sbase + b * ssz, dsz);
    });
    return;
  }
  // Float conversions (f32/f16/bf16, and f8e4m3 with saturation: core/dtype.h).
  auto convertible = [](DType d) { return is_floating(d) || d == DType::kF8E4M3; };
  RLM_CHECK(convertible(dtype_) && convertible(src.dtype_))
      << "copy_(): cannot convert " << dtype_name(src.dtype_) << " to " << dtype_name(dtype_);
  for_each_index(shape_, strides_, src.strides_, [&](int64_t a, int64_t b) {
    float v;
    convert_to_f32(sbase + b * ssz, src.dtype_, &v, 1);
    convert_from_f32(&v, dbase + a * dsz, dtype_, 1);
  });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  RLM_CHECK(defined()) << "clone() on an undefined tensor";
  Tensor t = empty(shape_, dtype_, device_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype, device_);
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor src = contiguous();
  Tensor t = empty(shape_, dtype_, device);
  t.copy_(src);
  return t;
}

void Tensor::fill_(double value) const {
  RLM_CHECK(device_.is_cpu()) << "fill_() is CPU-only; got " << describe();
  RLM_CHECK(!is_quantized(dtype_)) << "fill_() on a block-quantized tensor " << describe();
  Shape zero(dim(), 0);
  char* base = static_cast<char*>(data_ptr());
  const size_t sz = dtype_size(dtype_);
  unsigned char bytes[8];
  switch (dtype_) {
    case DType::kF32: { float v = static_cast<float>(value); std::memcpy(bytes, &v, 4); break; }
    case DType::kBF16: { bf16 v = f32_to_bf16(static_cast<float>(value)); std::memcpy(bytes, &v, 2); break; }
    case DType::kF16: { f16 v = f32_to_f16(static_cast<float>(value)); std::memcpy(bytes, &v, 2); break; }
    case DType::kI32: { int32_t v = static_cast<int32_t>(value); std::memcpy(bytes, &v, 4); break; }
    case DType::kI64: { int64_t v = static_cast<int64_t>(value); std::memcpy(bytes, &v, 8); break; }
    case DType::kU8: { uint8_t v = static_cast<uint8_t>(value); std::memcpy(bytes, &v, 1); break; }
    case DType::kI8: { int8_t v = static_cast<int8_t>(value); std::memcpy(bytes, &v, 1); break; }
    case DType::kF8E4M3: { f8e4m3 v = f32_to_f8e4m3(static_cast<float>(value)); std::memcpy(bytes, &v, 1); break; }
    default: break;  // block-quantized: rejected above
  }
  for_each_index(shape_, strides_, zero, [&](int64_t a, int64_t) { std::memcpy(base + a * sz, bytes, sz); });
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_to_string(shape_) + " " + device_.to_string();
}

}  // namespace rlm
