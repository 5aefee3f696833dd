#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/json.h"

namespace rlm {

using nlohmann::json;

// An mmapped file, unmapped when the last owner (a SafetensorsFile or a tensor view) goes.
class MappedFile {
 public:
  MappedFile(void* base, size_t size) : base_(base), size_(size) {}
  ~MappedFile() {
    if (base_ != nullptr) munmap(base_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps the whole file privately: pages are shared with the page cache until written; a write
  // through a tensor view copies the page and never reaches the file.
  static StatusOr<std::shared_ptr<MappedFile>> map(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) return not_found(str(path, ": no such file"));
      return invalid_argument(str(path, ": cannot open: ", std::strerror(err)));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return invalid_argument(str(path, ": not a regular file"));
    }
    const size_t size = static_cast<size_t>(st.st_size);
    if (size == 0) {
      ::close(fd);
      return std::make_shared<MappedFile>(nullptr, 0);
    }
    void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (base == MAP_FAILED) return internal_error(str(path, ": mmap of ", size, " bytes failed: ", std::strerror(err)));
    return std::make_shared<MappedFile>(base, size);
  }

  const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }
  size_t size() const { return size_; }

 private:
  void* base_;
  size_t size_;
};

namespace {

// The deepest nesting a well-formed header needs is 3 ({name: {shape: [...]}}); anything far
// deeper is rejected before parsing so that hostile input cannot exhaust the stack.
constexpr int kMaxHeaderDepth = 32;

// A JSON number that is a non-negative integer.
bool as_u64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

StatusOr<DType> safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "I32") return DType::kI32;
  if (name == "I64") return DType::kI64;
  if (name == "U8") return DType::kU8;
  if (name == "I8") return DType::kI8;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  for (const char* known : {"F64", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "BOOL", "I16",
                            "U16", "U32", "U64", "C64", "E8M0"}) {
    if (name == known) return unimplemented(str("dtype ", name, " is not supported (supported: F32, F16, BF16, I32, I64, U8, I8, F8_E4M3)"));
  }
  return data_loss(str("unknown dtype '", name, "'"));
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
    case DType::kF8E4M3: return "F8_E4M3";
    default: break;  // block-quantized dtypes have no safetensors name
  }
  fail(str("safetensors_dtype_name: no safetensors dtype for ", dtype_name(dtype)));
}

StatusOr<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  RLM_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapping, MappedFile::map(path));
  const uint64_t size = mapping->size();
  if (size < 8)
    return data_loss(str(path, ": file is ", size, " bytes, too short for the 8-byte safetensors header length"));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | mapping->data()[i];
  if (header_len > kSafetensorsMaxHeaderBytes)
    return data_loss(str(path, ": header length ", header_len, " exceeds the limit of ", kSafetensorsMaxHeaderBytes,
                         " bytes (not a safetensors file?)"));
  if (header_len > size - 8)
    return data_loss(str(path, ": header length ", header_len, " runs past the end of the file (", size,
                         " bytes; truncated?)"));

  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = std::move(mapping);
  const char* header = reinterpret_cast<const char*>(file->mapping_->data() + 8);
  file->data_ = file->mapping_->data() + 8 + header_len;
  try {
    RLM_RETURN_IF_ERROR(file->parse_header(header, header_len, size - 8 - header_len));
  } catch (const json::exception& e) {  // parse_header checks types first; this is a backstop
    return data_loss(str(path, ": malformed header: ", e.what()));
  }
  return file;
}

Status SafetensorsFile::parse_header(const char* header, uint64_t header_len, uint64_t data_len) {
  StatusOr<json> parsed = parse_json(std::string_view(header, header_len), {kMaxHeaderDepth, header_len});
  if (!parsed.is_ok()) return data_loss(str(path_, ": header ", parsed.status().message()));
  const json& j = *parsed;
  if (!j.is_object()) return data_loss(str(path_, ": header must be a JSON object, got ", j.type_name()));

  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return data_loss(str(path_, ": \"__metadata__\" must be an object, got ", v.type_name()));
      metadata_ = v;
      continue;
    }
    auto bad = [&](const std::string& what) { return data_loss(str(path_, ": tensor '", name, "': ", what)); };
    if (!v.is_object()) return bad(str("header entry must be an object, got ", v.type_name()));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) return bad(str("missing '", key, "'"));
    SafetensorsEntry e;
    e.name = name;
    if (!v.at("dtype").is_string()) return bad(str("'dtype' must be a string, got ", v.at("dtype").dump()));
    StatusOr<DType> dt = safetensors_dtype(v.at("dtype").get<std::string>());
    if (!dt.is_ok()) return Status(dt.status().code(), str(path_, ": tensor '", name, "': ", dt.status().message()));
    e.dtype = dt.value();

    const json& shape = v.at("shape");
    if (!shape.is_array()) return bad(str("'shape' must be a list, got ", shape.dump()));
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : shape) {
      uint64_t n;
      if (!as_u64(d, &n) || n > static_cast<uint64_t>(INT64_MAX))
        return bad(str("'shape' must hold non-negative integers, got ", shape.dump()));
      overflow |= __builtin_mul_overflow(numel, n, &numel);
      e.shape.push_back(static_cast<int64_t>(n));
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes);
    if (overflow) return bad(str("shape ", shape.dump(), " is too large"));

    const json& offsets = v.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !as_u64(offsets[0], &e.begin) || !as_u64(offsets[1], &e.end))
      return bad(str("'data_offsets' must be [begin, end] with non-negative integers, got ", offsets.dump()));
    if (e.begin > e.end) return bad(str("data_offsets ", offsets.dump(), " end before they begin"));
    if (e.end > data_len)
      return bad(str("data_offsets ", offsets.dump(), " run past the data region of ", data_len,
                     " bytes (truncated file?)"));
    if (e.end - e.begin != nbytes)
      return bad(str("data_offsets ", offsets.dump(), " span ", e.end - e.begin, " bytes but ",
                     safetensors_dtype_name(e.dtype), shape.dump(), " needs ", nbytes));
    entries.push_back(std::move(e));
  }

  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].begin < entries[i - 1].end)
      return data_loss(str(path_, ": tensors '", entries[i - 1].name, "' and '", entries[i].name,
                           "' overlap in the data region"));
  }
  for (SafetensorsEntry& e : entries) {
    names_.push_back(e.name);
    entries_.emplace(e.name, std::move(e));
  }
  return Status::ok();
}

uint64_t SafetensorsFile::file_size() const { return mapping_->size(); }

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

StatusOr<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return not_found(str("tensor '", name, "' not found in ", path_));
  const uint8_t* ptr = data_ + e->begin;
  if (reinterpret_cast<uintptr_t>(ptr) % dtype_size(e->dtype) == 0) {
    return Tensor::from_blob(const_cast<uint8_t*>(ptr), e->shape, e->dtype, Device::cpu(), mapping_);
  }
  // safetensors does not promise alignment; a misaligned view would be undefined behaviour.
  Tensor t = Tensor::empty(e->shape, e->dtype);
  if (e->end > e->begin) std::memcpy(t.data_ptr(), ptr, e->end - e->begin);
  return t;
}

}  // namespace rlm
