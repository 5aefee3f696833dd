// Tensor: dtype, shape, strides, device and shared storage. Views and slices share storage and
// never copy; every accessor checks its preconditions and names the offending shape/dtype.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"

namespace rlm {

using Shape = std::vector<int64_t>;

std::string shape_to_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

// A block of memory on one device, released by its deleter when the last tensor goes.
class Storage {
 public:
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void(void*)> deleter_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());
  // Wraps external memory; `owner` is kept alive as long as any view exists (e.g. an mmap).
  static Tensor from_blob(void* data, Shape shape, DType dtype, Device device,
                          std::shared_ptr<void> owner);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape) {
    RLM_CHECK_EQ(static_cast<int64_t>(values.size()), shape_numel(shape))
        << " from_vector shape " << shape_to_string(shape);
    Tensor t = empty(std::move(shape), DTypeOf<T>::value);
    if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
    return t;
  }
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{static_cast<int64_t>(values.size())});
  }

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  // Block-quantized dtypes: numel() counts logical elements, nbytes() the blocks' bytes; offsets,
  // slices and views along the last dimension must fall on block boundaries.
  size_t nbytes() const { return dtype_nbytes(dtype_, numel()); }
  size_t element_size() const { return dtype_size(dtype_); }  // plain dtypes only
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  int64_t offset() const { return offset_; }  // in elements from the storage start

  void* data_ptr() const;
  template <typename T>
  T* data() const {
    RLM_CHECK(dtype_ == DTypeOf<T>::value)
        << "data<" << dtype_name(DTypeOf<T>::value) << ">() on a tensor of dtype " << dtype_name(dtype_);
    return static_cast<T*>(data_ptr());
  }
  // Element access for CPU tensors (any strides); for tests and small host-side work.
  template <typename T>
  T& at(std::initializer_list<int64_t> index) const {
    RLM_CHECK(device_.is_cpu()) << "at() on " << device_.to_string();
    RLM_CHECK_EQ(static_cast<int64_t>(index.size()), dim());
    int64_t off = 0, d = 0;
    for (int64_t i : index) {
      RLM_CHECK(i >= 0 && i < shape_[d]) << "index " << i << " out of range for dim " << d << " of " << describe();
      off += i * strides_[d++];
    }
    return data<T>()[off];
  }

  // A view with a new shape (one dimension may be -1); requires a contiguous tensor.
  Tensor view(Shape shape) const;
  // Elements [start, end) along `d`, sharing storage.
  Tensor slice(int64_t d, int64_t start, int64_t end) const;
  // Removes dimension `d` by taking index `i` along it.
  Tensor select(int64_t d, int64_t i) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor unsqueeze(int64_t d) const;

  // A contiguous copy on the same device (returns *this when already contiguous).
  Tensor contiguous() const;
  Tensor clone() const;
  // A converted copy (CPU: any float dtype <-> any float dtype; ints copy only).
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  // Copies `src` (same shape; dtype converts on CPU) into this tensor in place.
  void copy_(const Tensor& src) const;
  // Fills a CPU tensor (any float or int dtype) with `value`.
  void fill_(double value) const;

  // "f32[2, 3] cpu" — used in every check message.
  std::string describe() const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  DType dtype_ = DType::kF32;
  Device device_;
  Shape shape_;
  Shape strides_;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace rlm
