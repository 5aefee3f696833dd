// Helpers for GGUF tests: temporary files and a field-by-field GGUF byte builder.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "formats/gguf.h"

namespace rlm::gguf_test {

// A file under /tmp holding `bytes`, removed at scope exit.
class TempFile {
 public:
  explicit TempFile(const std::string& bytes) {
    char tmpl[] = "/tmp/gguf_reader_test_XXXXXX";
    const int fd = ::mkstemp(tmpl);
    RLM_CHECK(fd >= 0);
    path_ = tmpl;
    RLM_CHECK_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
  }
  ~TempFile() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline StatusOr<std::shared_ptr<GgufFile>> open_bytes(const std::string& bytes) {
  TempFile f(bytes);
  return GgufFile::open(f.path());
}

// Builds GGUF byte strings field by field (little-endian), for malformed-input tests.
class Builder {
 public:
  Builder& u8(uint8_t v) { return raw(&v, 1); }
  Builder& u32(uint32_t v) { return raw(&v, 4); }
  Builder& u64(uint64_t v) { return raw(&v, 8); }
  Builder& str(const std::string& s) {
    u64(s.size());
    bytes_ += s;
    return *this;
  }
  Builder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    bytes_ += "GGUF";
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Builder& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  Builder& kv_f32(const std::string& key, float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return str(key).u32(6).u32(bits);
  }
  Builder& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  // A tensor info: `ne` innermost first, as GGUF stores it.
  Builder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Builder& pad_to(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back('\0');
    return *this;
  }
  Builder& zeros(size_t n) {
    bytes_.append(n, '\0');
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  Builder& raw(const void* p, size_t n) {
    bytes_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string bytes_;
};

}  // namespace rlm::gguf_test
