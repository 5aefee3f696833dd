#include "formats/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

namespace rlm {

namespace {

constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;            // nesting of arrays inside arrays
constexpr uint64_t kMaxNestedElements = 1u << 20;  // total elements of arrays of arrays
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;       // empty key, type, smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims=0, type, offset

// Bytes of one scalar element; 0 for string/array.
uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

bool is_known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Smallest number of file bytes one element of type `t` can take (for count sanity checks).
uint64_t min_element_bytes(GgufValueType t) {
  if (t == GgufValueType::kString) return 8;
  if (t == GgufValueType::kArray) return 4 + 8;
  return scalar_size(t);
}

uint64_t load_le(const uint8_t* p, uint64_t n) {
  uint64_t v = 0;
  std::memcpy(&v, p, n);  // little-endian host
  return v;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  switch (id) {
    case 0: return GgmlTypeTraits{"F32", 1, 4};
    case 1: return GgmlTypeTraits{"F16", 1, 2};
    case 2: return GgmlTypeTraits{"Q4_0", 32, 18};
    case 3: return GgmlTypeTraits{"Q4_1", 32, 20};
    case 6: return GgmlTypeTraits{"Q5_0", 32, 22};
    case 7: return GgmlTypeTraits{"Q5_1", 32, 24};
    case 8: return GgmlTypeTraits{"Q8_0", 32, 34};
    case 9: return GgmlTypeTraits{"Q8_1", 32, 40};
    case 10: return GgmlTypeTraits{"Q2_K", 256, 84};
    case 11: return GgmlTypeTraits{"Q3_K", 256, 110};
    case 12: return GgmlTypeTraits{"Q4_K", 256, 144};
    case 13: return GgmlTypeTraits{"Q5_K", 256, 176};
    case 14: return GgmlTypeTraits{"Q6_K", 256, 210};
    case 15: return GgmlTypeTraits{"Q8_K", 256, 292};
    case 16: return GgmlTypeTraits{"IQ2_XXS", 256, 66};
    case 17: return GgmlTypeTraits{"IQ2_XS", 256, 74};
    case 18: return GgmlTypeTraits{"IQ3_XXS", 256, 98};
    case 19: return GgmlTypeTraits{"IQ1_S", 256, 50};
    case 20: return GgmlTypeTraits{"IQ4_NL", 32, 18};
    case 21: return GgmlTypeTraits{"IQ3_S", 256, 110};
    case 22: return GgmlTypeTraits{"IQ2_S", 256, 82};
    case 23: return GgmlTypeTraits{"IQ4_XS", 256, 136};
    case 24: return GgmlTypeTraits{"I8", 1, 1};
    case 25: return GgmlTypeTraits{"I16", 1, 2};
    case 26: return GgmlTypeTraits{"I32", 1, 4};
    case 27: return GgmlTypeTraits{"I64", 1, 8};
    case 28: return GgmlTypeTraits{"F64", 1, 8};
    case 29: return GgmlTypeTraits{"IQ1_M", 256, 56};
    case 30: return GgmlTypeTraits{"BF16", 1, 2};
    case 34: return GgmlTypeTraits{"TQ1_0", 256, 54};
    case 35: return GgmlTypeTraits{"TQ2_0", 256, 66};
    case 39: return GgmlTypeTraits{"MXFP4", 32, 17};
    default: return std::nullopt;
  }
}

const char* ggml_type_name(GgmlType type) {
  auto traits = ggml_type_traits(static_cast<uint32_t>(type));
  return traits ? traits->name : "unknown";
}

// ---- GgufValue ------------------------------------------------------------------------------

std::optional<int64_t> GgufValue::as_int() const {
  switch (type_) {
    case GgufValueType::kUint8:
    case GgufValueType::kUint16:
    case GgufValueType::kUint32: return static_cast<int64_t>(bits_);
    case GgufValueType::kInt8: return static_cast<int64_t>(static_cast<int8_t>(bits_));
    case GgufValueType::kInt16: return static_cast<int64_t>(static_cast<int16_t>(bits_));
    case GgufValueType::kInt32: return static_cast<int64_t>(static_cast<int32_t>(bits_));
    case GgufValueType::kInt64: return static_cast<int64_t>(bits_);
    case GgufValueType::kUint64:
      if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(bits_);
    default: return std::nullopt;
  }
}

std::optional<double> GgufValue::as_float() const {
  if (type_ == GgufValueType::kFloat32) {
    float f;
    uint32_t u = static_cast<uint32_t>(bits_);
    std::memcpy(&f, &u, 4);
    return static_cast<double>(f);
  }
  if (type_ == GgufValueType::kFloat64) {
    double d;
    std::memcpy(&d, &bits_, 8);
    return d;
  }
  if (type_ == GgufValueType::kUint64) return static_cast<double>(bits_);
  if (auto i = as_int()) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type_ != GgufValueType::kBool) return std::nullopt;
  return bits_ != 0;
}

std::optional<std::string_view> GgufValue::as_string() const {
  if (type_ != GgufValueType::kString) return std::nullopt;
  return string_;
}

GgufValue GgufValue::at(size_t i) const {
  RLM_CHECK(type_ == GgufValueType::kArray) << "GgufValue::at on a " << gguf_value_type_name(type_);
  RLM_CHECK_LT(i, array_size_) << " GgufValue::at index out of range";
  if (array_type_ == GgufValueType::kString) {
    GgufValue v;
    v.type_ = GgufValueType::kString;
    v.string_ = (*strings_)[i];
    return v;
  }
  if (array_type_ == GgufValueType::kArray) return (*elements_)[i];
  GgufValue v;
  v.type_ = array_type_;
  const uint64_t n = scalar_size(array_type_);
  v.bits_ = load_le(array_raw_ + i * n, n);
  return v;
}

std::string GgufValue::describe() const {
  switch (type_) {
    case GgufValueType::kString: {
      std::string s(string_.substr(0, 64));
      return str("string \"", s, string_.size() > 64 ? "...\"" : "\"");
    }
    case GgufValueType::kArray:
      return str("array<", gguf_value_type_name(array_type_), ">[", array_size_, "]");
    case GgufValueType::kBool: return bits_ ? "bool true" : "bool false";
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64: return str(gguf_value_type_name(type_), " ", *as_float());
    case GgufValueType::kUint64: return str("uint64 ", bits_);
    default: return str(gguf_value_type_name(type_), " ", *as_int());
  }
}

// ---- the parser -----------------------------------------------------------------------------

class GgufParser {
 public:
  explicit GgufParser(GgufFile& file) : f_(file) {}

  Status parse() {
    RLM_RETURN_IF_ERROR(need(4, "the magic"));
    if (std::memcmp(f_.data_, "GGUF", 4) != 0) {
      return data_loss(str(where(), "not a GGUF file (magic bytes are not \"GGUF\")"));
    }
    pos_ = 4;
    uint32_t version = 0;
    RLM_RETURN_IF_ERROR(read_u32(&version, "the version"));
    if (version != 2 && version != 3) {
      const bool swapped = version == 0x02000000u || version == 0x03000000u;
      return unimplemented(str(where(), "unsupported GGUF version ", version,
                               swapped ? " (a big-endian file?)" : "", "; supported: 2, 3"));
    }
    f_.version_ = version;
    uint64_t tensor_count = 0, kv_count = 0;
    RLM_RETURN_IF_ERROR(read_u64(&tensor_count, "the tensor count"));
    RLM_RETURN_IF_ERROR(read_u64(&kv_count, "the metadata key/value count"));
    const uint64_t rest = f_.size_ - pos_;
    if (kv_count > rest / kMinKvBytes || tensor_count > rest / kMinTensorInfoBytes ||
        kv_count * kMinKvBytes + tensor_count * kMinTensorInfoBytes > rest) {
      return data_loss(str(where(), "header claims ", tensor_count, " tensors and ", kv_count,
                           " metadata keys, impossible in a file of ", f_.size_, " bytes"));
    }
    for (uint64_t i = 0; i < kv_count; ++i) RLM_RETURN_IF_ERROR(parse_kv(i));
    RLM_RETURN_IF_ERROR(read_alignment());
    f_.tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) RLM_RETURN_IF_ERROR(parse_tensor_info(i));
    context_ = "the data section";
    const uint64_t data_offset = align_up(pos_, f_.alignment_);
    if (tensor_count > 0 && data_offset > f_.size_) {
      return data_loss(str(where(), "truncated: the data section would start at offset ",
                           data_offset, " but the file has ", f_.size_, " bytes"));
    }
    f_.data_offset_ = data_offset;
    for (const GgufTensorInfo& t : f_.tensors_) {
      const uint64_t avail = f_.size_ > data_offset ? f_.size_ - data_offset : 0;
      if (t.offset > avail || t.nbytes > avail - t.offset) {
        return data_loss(str(where(), "truncated: tensor '", t.name, "' data [", data_offset + t.offset,
                             ", ", data_offset + t.offset + t.nbytes, ") runs past the end of the file (",
                             f_.size_, " bytes)"));
      }
    }
    return Status::ok();
  }

 private:
  std::string where() const {
    return context_.empty() ? str("gguf ", f_.path_, ": ") : str("gguf ", f_.path_, ": ", context_, ": ");
  }

  Status need(uint64_t n, const char* what) {
    if (pos_ > f_.size_ || n > f_.size_ - pos_) {
      return data_loss(str(where(), "truncated while reading ", what, " (need ", n, " bytes at offset ",
                           pos_, ", file has ", f_.size_, ")"));
    }
    return Status::ok();
  }
  Status read_u32(uint32_t* out, const char* what) {
    RLM_RETURN_IF_ERROR(need(4, what));
    *out = static_cast<uint32_t>(load_le(f_.data_ + pos_, 4));
    pos_ += 4;
    return Status::ok();
  }
  Status read_u64(uint64_t* out, const char* what) {
    RLM_RETURN_IF_ERROR(need(8, what));
    *out = load_le(f_.data_ + pos_, 8);
    pos_ += 8;
    return Status::ok();
  }
  Status read_string(std::string_view* out, const char* what) {
    uint64_t len = 0;
    RLM_RETURN_IF_ERROR(read_u64(&len, what));
    if (len > f_.size_ - pos_) {
      return data_loss(str(where(), "truncated: ", what, " has length ", len, " but only ",
                           f_.size_ - pos_, " bytes remain at offset ", pos_));
    }
    *out = std::string_view(reinterpret_cast<const char*>(f_.data_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }
  Status read_type(GgufValueType* out, const char* what) {
    uint32_t t = 0;
    RLM_RETURN_IF_ERROR(read_u32(&t, what));
    if (!is_known_value_type(t)) return data_loss(str(where(), "unknown metadata value type ", t));
    *out = static_cast<GgufValueType>(t);
    return Status::ok();
  }

  Status read_value(GgufValueType type, GgufValue* out, int depth) {
    out->type_ = type;
    if (type == GgufValueType::kString) return read_string(&out->string_, "a string value");
    if (type != GgufValueType::kArray) {
      const uint64_t n = scalar_size(type);
      RLM_RETURN_IF_ERROR(need(n, "a scalar value"));
      out->bits_ = load_le(f_.data_ + pos_, n);
      if (type == GgufValueType::kBool && out->bits_ > 1) {
        return data_loss(str(where(), "bool value byte is ", out->bits_, " (expected 0 or 1)"));
      }
      pos_ += n;
      return Status::ok();
    }
    if (depth >= kMaxArrayDepth) {
      return data_loss(str(where(), "arrays nested deeper than ", kMaxArrayDepth));
    }
    RLM_RETURN_IF_ERROR(read_type(&out->array_type_, "an array element type"));
    uint64_t count = 0;
    RLM_RETURN_IF_ERROR(read_u64(&count, "an array length"));
    const uint64_t min_bytes = min_element_bytes(out->array_type_);
    if (count > (f_.size_ - pos_) / min_bytes) {
      return data_loss(str(where(), "truncated: array<", gguf_value_type_name(out->array_type_), "> claims ",
                           count, " elements but only ", f_.size_ - pos_, " bytes remain at offset ", pos_));
    }
    out->array_size_ = count;
    if (out->array_type_ == GgufValueType::kString) {
      auto strings = std::make_shared<std::vector<std::string_view>>(count);
      for (uint64_t i = 0; i < count; ++i) RLM_RETURN_IF_ERROR(read_string(&(*strings)[i], "an array string"));
      out->strings_ = std::move(strings);
    } else if (out->array_type_ == GgufValueType::kArray) {
      nested_elements_ += count;
      if (nested_elements_ > kMaxNestedElements) {
        return data_loss(str(where(), "more than ", kMaxNestedElements, " elements in nested arrays"));
      }
      auto elements = std::make_shared<std::vector<GgufValue>>(count);
      for (uint64_t i = 0; i < count; ++i) {
        RLM_RETURN_IF_ERROR(read_value(GgufValueType::kArray, &(*elements)[i], depth + 1));
      }
      out->elements_ = std::move(elements);
    } else {
      out->array_raw_ = f_.data_ + pos_;  // count * min_bytes fits: checked above
      pos_ += count * min_bytes;
    }
    return Status::ok();
  }

  Status parse_kv(uint64_t index) {
    context_ = str("metadata entry #", index);
    std::string_view key;
    RLM_RETURN_IF_ERROR(read_string(&key, "a metadata key"));
    context_ = str("metadata key '", key, "'");
    GgufValueType type;
    RLM_RETURN_IF_ERROR(read_type(&type, "a metadata value type"));
    GgufValue value;
    RLM_RETURN_IF_ERROR(read_value(type, &value, 0));
    std::string k(key);
    if (!f_.metadata_.emplace(k, std::move(value)).second) {
      return data_loss(str(where(), "duplicate metadata key"));
    }
    f_.key_order_.push_back(std::move(k));
    return Status::ok();
  }

  Status read_alignment() {
    const GgufValue* v = f_.find("general.alignment");
    if (v == nullptr) return Status::ok();
    context_ = "metadata key 'general.alignment'";
    auto a = v->as_int();
    if (v->type() != GgufValueType::kUint32 || !a || *a <= 0 || (*a & (*a - 1)) != 0) {
      return data_loss(str(where(), "must be a uint32 power of two, got ", v->describe()));
    }
    f_.alignment_ = static_cast<uint64_t>(*a);
    return Status::ok();
  }

  Status parse_tensor_info(uint64_t index) {
    context_ = str("tensor info #", index);
    std::string_view name;
    RLM_RETURN_IF_ERROR(read_string(&name, "a tensor name"));
    context_ = str("tensor '", name, "'");
    uint32_t n_dims = 0;
    RLM_RETURN_IF_ERROR(read_u32(&n_dims, "the number of dimensions"));
    if (n_dims > kMaxDims) return data_loss(str(where(), n_dims, " dimensions (at most ", kMaxDims, ")"));
    GgufTensorInfo info;
    info.name = std::string(name);
    std::vector<uint64_t> ne(n_dims);
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      RLM_RETURN_IF_ERROR(read_u64(&ne[d], "a dimension"));
      if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (ne[d] != 0 && numel > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(ne[d]))) {
        return data_loss(str(where(), "dimension ", d, " = ", ne[d], " overflows the element count"));
      }
      numel *= static_cast<int64_t>(ne[d]);
    }
    for (uint32_t d = n_dims; d-- > 0;) info.shape.push_back(static_cast<int64_t>(ne[d]));
    uint32_t type_id = 0;
    RLM_RETURN_IF_ERROR(read_u32(&type_id, "the tensor type"));
    auto traits = ggml_type_traits(type_id);
    if (!traits) return unimplemented(str(where(), "unknown ggml tensor type id ", type_id));
    info.type = static_cast<GgmlType>(type_id);
    const int64_t row = n_dims > 0 ? static_cast<int64_t>(ne[0]) : 1;
    if (row % traits->block_size != 0) {
      return data_loss(str(where(), "row length ", row, " is not a multiple of the ", traits->name,
                           " block size ", traits->block_size));
    }
    // The byte count must fit too: a large enough element count (fuzzed, 2026-11-27) wrapped it
    // around to a few bytes that passed the bounds check below, and reading the tensor ran past
    // the buffers sized by the element count.
    const int64_t blocks = numel / traits->block_size;
    if (blocks > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(traits->type_size)) {
      return data_loss(str(where(), numel, " elements of ", traits->name, " overflow the byte count"));
    }
    info.nbytes = static_cast<uint64_t>(blocks) * static_cast<uint64_t>(traits->type_size);
    RLM_RETURN_IF_ERROR(read_u64(&info.offset, "the tensor data offset"));
    if (info.offset % f_.alignment_ != 0) {
      return data_loss(str(where(), "data offset ", info.offset, " is not a multiple of the alignment ",
                           f_.alignment_));
    }
    if (!f_.tensor_index_.emplace(info.name, f_.tensors_.size()).second) {
      return data_loss(str(where(), "duplicate tensor name"));
    }
    f_.tensors_.push_back(std::move(info));
    return Status::ok();
  }

  static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

  GgufFile& f_;
  uint64_t pos_ = 0;
  std::string context_;
  uint64_t nested_elements_ = 0;
};

// ---- GgufFile -------------------------------------------------------------------------------

StatusOr<std::shared_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(str("gguf ", path, ": cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(str("gguf ", path, ": not a regular file"));
  }
  std::shared_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return internal_error(str("gguf ", path, ": mmap failed: ", std::strerror(err)));
    }
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  GgufParser parser(*file);
  RLM_RETURN_IF_ERROR(parser.parse());
  return file;
}

GgufFile::~GgufFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::vector<std::string> GgufFile::keys() const { return key_order_; }

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_float() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  return v ? v->as_bool() : std::nullopt;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type() != GgufValueType::kString) return std::nullopt;
  return std::string(*v->as_string());
}

std::optional<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type() != GgufValueType::kArray || v->array_type() != GgufValueType::kString) {
    return std::nullopt;
  }
  std::vector<std::string> out;
  out.reserve(v->array_size());
  for (size_t i = 0; i < v->array_size(); ++i) out.emplace_back(*v->at(i).as_string());
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type() != GgufValueType::kArray) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(v->array_size());
  for (size_t i = 0; i < v->array_size(); ++i) {
    auto x = v->at(i).as_int();
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

std::optional<std::vector<double>> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->type() != GgufValueType::kArray) return std::nullopt;
  std::vector<double> out;
  out.reserve(v->array_size());
  for (size_t i = 0; i < v->array_size(); ++i) {
    auto x = v->at(i).as_float();
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<std::span<const uint8_t>> GgufFile::tensor_data(const std::string& name) const {
  const GgufTensorInfo* info = find_tensor(name);
  if (info == nullptr) return not_found(str("gguf ", path_, ": no tensor named '", name, "'"));
  return tensor_data(*info);
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& info) const {
  RLM_CHECK(find_tensor(info.name) == &info) << "tensor info '" << info.name << "' is not from " << path_;
  return {data_ + data_offset_ + info.offset, info.nbytes};
}

}  // namespace rlm
