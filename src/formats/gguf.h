// GGUF (v3, v2) model files: header, metadata key/values and tensor infos, read from an mmap.
// Everything is validated at open(): truncation anywhere is kDataLoss, an unsupported version or
// an unknown ggml tensor type is kUnimplemented, absurd counts/lengths are rejected before any
// allocation. Tensor data stays in the mapping; tensor_data() gives a view of the raw bytes
// (dequantization lives in gguf_dequant.h).
//
// Shapes: GGUF lists dims innermost first (ne[0] = row length). GgufTensorInfo::shape is in our
// row-major convention [outer..., inner], i.e. the GGUF dims reversed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace rlm {

// Metadata value types (ids as stored in the file).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* gguf_value_type_name(GgufValueType type);  // "uint32", "string", ...

// ggml tensor types (ids as in ggml.h). Ids missing here (4, 5, 31..33, 36..38) were removed
// from ggml and are rejected as unknown.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21,
  kIQ2_S = 22, kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28,
  kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
};

// Block geometry of a ggml type: `block_size` elements are stored in `type_size` bytes.
struct GgmlTypeTraits {
  const char* name;  // "Q4_1", "F32", ...
  int64_t block_size;
  int64_t type_size;
};
// nullopt for an id that is not a known ggml type.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);
const char* ggml_type_name(GgmlType type);

// One metadata value. Strings and arrays of scalars are views into the file's mapping: a value
// is valid while its GgufFile lives. Copies are cheap (array elements are shared).
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  // Integer types (uint8..int64; a uint64 above INT64_MAX gives nullopt). Not bool.
  std::optional<int64_t> as_int() const;
  // float32/float64, and integer types converted.
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  // Only for kString.
  std::optional<std::string_view> as_string() const;
  // Only for kArray: the element type, the element count and element `i` (checked).
  GgufValueType array_type() const { return array_type_; }
  size_t array_size() const { return array_size_; }
  GgufValue at(size_t i) const;
  // "uint32 3", "string \"llama\"", "array<string>[49152]": for messages.
  std::string describe() const;

 private:
  friend class GgufParser;
  GgufValueType type_ = GgufValueType::kUint8;
  uint64_t bits_ = 0;         // scalars: the little-endian bits, zero-extended
  std::string_view string_;   // kString
  GgufValueType array_type_ = GgufValueType::kUint8;
  size_t array_size_ = 0;
  const uint8_t* array_raw_ = nullptr;  // arrays of scalars: the packed elements in the file
  std::shared_ptr<const std::vector<std::string_view>> strings_;  // arrays of strings
  std::shared_ptr<const std::vector<GgufValue>> elements_;        // arrays of arrays
};

struct GgufTensorInfo {
  std::string name;
  Shape shape;            // row-major [outer..., inner]: the GGUF dims reversed
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;    // from the start of the data section (a multiple of alignment())
  uint64_t nbytes = 0;    // bytes of (possibly quantized) data
  int64_t numel() const { return shape_numel(shape); }
};

class GgufFile {
 public:
  // Maps and validates `path`. Errors name the file and what is wrong.
  static StatusOr<std::shared_ptr<GgufFile>> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }  // general.alignment, default 32
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section

  // ---- metadata ----
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  const GgufValue* find(const std::string& key) const;  // nullptr when absent
  std::vector<std::string> keys() const;                // in file order
  // nullopt when the key is absent or its value has another type (see GgufValue::as_*).
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  // Arrays: nullopt when absent, not an array, or an element has another type.
  std::optional<std::vector<std::string>> get_string_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> get_int_array(const std::string& key) const;
  std::optional<std::vector<double>> get_float_array(const std::string& key) const;

  // ---- tensors ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }  // in file order
  const GgufTensorInfo* find_tensor(const std::string& name) const;  // nullptr when absent
  // The raw bytes of tensor `name` (kNotFound naming the tensor and file when absent).
  StatusOr<std::span<const uint8_t>> tensor_data(const std::string& name) const;
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& info) const;

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::string path_;
  const uint8_t* data_ = nullptr;  // the whole file, mapped read-only
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> key_order_;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace rlm
