// Reader for one .safetensors file: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}), then the data.
// The file is mmapped read-only (MAP_PRIVATE); tensors are views into the mapping, which stays
// alive as long as any view (or the SafetensorsFile) does. Every header field is validated at
// open; malformed files give kDataLoss naming the path and the tensor, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace rlm {

// Headers larger than this are rejected as corrupt (the safetensors library uses the same bound).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Maps a safetensors dtype string to ours: F32, F16, BF16, I32, I64, U8, I8. Other valid
// safetensors dtypes (F64, F8_*, BOOL, I16, U16, U32, U64, ...) give kUnimplemented; strings that
// are no safetensors dtype at all give kDataLoss.
StatusOr<DType> safetensors_dtype(const std::string& name);
// Our dtype as a safetensors dtype string ("F32", "BF16", ...).
const char* safetensors_dtype_name(DType dtype);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data region (after the header)
  uint64_t end = 0;
};

class MappedFile;

class SafetensorsFile {
 public:
  // Maps and validates `path`. kNotFound when it does not exist, kDataLoss when it is malformed,
  // kUnimplemented for tensors of a dtype we do not support.
  static StatusOr<std::shared_ptr<SafetensorsFile>> open(const std::string& path);

  const std::string& path() const { return path_; }
  uint64_t file_size() const;
  // Tensor names in the order of their data offsets.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // nullptr when absent.
  const SafetensorsEntry* find(const std::string& name) const;
  // A CPU tensor viewing the mapped bytes (a copy only when the data is not aligned to the
  // element size). kNotFound naming the tensor and the file when absent.
  StatusOr<Tensor> tensor(const std::string& name) const;
  // The "__metadata__" object (empty when absent).
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  Status parse_header(const char* header, uint64_t header_len, uint64_t data_len);

  std::string path_;
  std::shared_ptr<MappedFile> mapping_;
  const uint8_t* data_ = nullptr;  // start of the data region inside the mapping
  std::unordered_map<std::string, SafetensorsEntry> entries_;
  std::vector<std::string> names_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

}  // namespace rlm
