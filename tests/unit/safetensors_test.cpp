// SafetensorsFile against a file written by Python's `safetensors` (tests/data/safetensors, from
// tools/make_safetensors_fixture.py) and against files written here, malformed ones included;
// open_safetensors (single file, sharded index, directory scan) and make_dummy_weights.
#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "formats/gguf_dequant.h"
#include "model/weight_source.h"

namespace rlm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixture = fs::path(RADIXLM_SOURCE_DIR) / "tests" / "data" / "safetensors" / "fixture.safetensors";

// ---- a small safetensors writer --------------------------------------------------------------

struct StTensor {
  std::string name;
  std::string dtype;  // safetensors dtype string
  Shape shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
StTensor st_tensor(std::string name, std::string dtype, Shape shape, const std::vector<T>& values) {
  StTensor t{std::move(name), std::move(dtype), std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// The header JSON the way the safetensors library lays it out (tensors back to back).
json header_for(const std::vector<StTensor>& tensors, const json& metadata = nullptr) {
  json h = json::object();
  if (!metadata.is_null()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  return h;
}

// 8-byte length + header text (space-padded to `align`) + data.
std::string file_bytes(const std::string& header, const std::string& data, size_t align = 8) {
  std::string h = header;
  while ((8 + h.size()) % align != 0) h += ' ';
  return u64_le(h.size()) + h + data;
}

std::string data_of(const std::vector<StTensor>& tensors) {
  std::string d;
  for (const StTensor& t : tensors) d.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  return d;
}

std::string safetensors_bytes(const std::vector<StTensor>& tensors, const json& metadata = nullptr) {
  return file_bytes(header_for(tensors, metadata).dump(), data_of(tensors));
}

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("rlm_safetensors_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path write(const std::string& name, const std::string& bytes) const {
    fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<StTensor> sample_tensors() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> a(12), c(5);
  for (float& v : a) v = normal(rng);
  for (float& v : c) v = normal(rng);
  std::vector<bf16> b;
  for (int i = 0; i < 6; ++i) b.push_back(f32_to_bf16(normal(rng)));
  return {st_tensor("a.weight", "F32", {3, 4}, a), st_tensor("b.weight", "BF16", {2, 3}, b),
          st_tensor("c.bias", "F32", {5}, c), st_tensor("d.ids", "I64", {2}, std::vector<int64_t>{-5, 1LL << 40})};
}

// Opens `bytes` written to a file; expects failure with `code` and a message naming the path and `needle`.
void expect_open_error(const std::string& bytes, StatusCode code, const std::string& needle) {
  TempDir dir;
  const fs::path p = dir.write("bad.safetensors", bytes);
  StatusOr<std::shared_ptr<SafetensorsFile>> f = SafetensorsFile::open(p.string());
  ASSERT_FALSE(f.is_ok()) << "opened a malformed file; expected " << needle;
  EXPECT_EQ(f.status().code(), code) << f.status().to_string();
  EXPECT_NE(f.status().message().find(p.string()), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find(needle), std::string::npos)
      << "message '" << f.status().message() << "' does not mention '" << needle << "'";
}

// ---- reading -----------------------------------------------------------------------------------

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[i];
    case DType::kF16: return f16_to_f32(t.data<f16>()[i]);
    case DType::kBF16: return bf16_to_f32(t.data<bf16>()[i]);
    case DType::kI32: return t.data<int32_t>()[i];
    case DType::kI64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kU8: return t.data<uint8_t>()[i];
    case DType::kI8: return t.data<int8_t>()[i];
    default: break;  // block-quantized dtypes never come from safetensors
  }
  return NAN;
}

TEST(Safetensors, ReadsAFileWrittenByPythonSafetensors) {
  std::ifstream in(fs::path(kFixture).replace_extension(".json"));
  ASSERT_TRUE(in.good());
  const json ref = json::parse(in);
  StatusOr<std::shared_ptr<SafetensorsFile>> opened = SafetensorsFile::open(kFixture.string());
  ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
  std::shared_ptr<SafetensorsFile> file = opened.value();
  EXPECT_EQ(file->metadata(), ref.at("__metadata__"));
  EXPECT_EQ(file->names().size(), ref.at("tensors").size());
  std::vector<Tensor> views;
  for (const auto& [name, r] : ref.at("tensors").items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file->has(name));
    StatusOr<Tensor> t = file->tensor(name);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(safetensors_dtype_name(t->dtype()), r.at("dtype").get<std::string>());
    EXPECT_EQ(t->shape(), r.at("shape").get<Shape>());
    const auto values = r.at("values").get<std::vector<double>>();
    ASSERT_EQ(t->numel(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(element(t.value(), i), values[i]) << "element " << i;
    views.push_back(t.value());
  }
  // Views point into the mapping: no copy, and they outlive the file object.
  const Tensor w = file->tensor("model.embed_tokens.weight").value();
  EXPECT_EQ(w.data_ptr(), file->tensor("model.embed_tokens.weight").value().data_ptr());
  const float first = w.data<float>()[0];
  file.reset();
  opened = Status(StatusCode::kInternal, "released");
  EXPECT_EQ(w.data<float>()[0], first);
  EXPECT_EQ(w.data<float>()[0], ref.at("tensors").at("model.embed_tokens.weight").at("values")[0].get<float>());
}

TEST(Safetensors, RoundTripsItsOwnWriterAndMetadata) {
  TempDir dir;
  const std::vector<StTensor> tensors = sample_tensors();
  const json meta = {{"format", "pt"}};
  const fs::path p = dir.write("m.safetensors", safetensors_bytes(tensors, meta));
  auto f = SafetensorsFile::open(p.string());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f.value()->metadata(), meta);
  EXPECT_EQ(f.value()->names(), (std::vector<std::string>{"a.weight", "b.weight", "c.bias", "d.ids"}));
  for (const StTensor& st : tensors) {
    Tensor t = f.value()->tensor(st.name).value();
    EXPECT_EQ(t.shape(), st.shape);
    EXPECT_EQ(safetensors_dtype_name(t.dtype()), st.dtype);
    ASSERT_EQ(t.nbytes(), st.bytes.size());
    EXPECT_EQ(std::memcmp(t.data_ptr(), st.bytes.data(), st.bytes.size()), 0) << st.name;
  }
  StatusOr<Tensor> missing = f.value()->tensor("nope");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

TEST(Safetensors, MisalignedDataIsCopiedToAlignedMemory) {
  TempDir dir;
  std::vector<StTensor> tensors = {st_tensor("u", "U8", {1}, std::vector<uint8_t>{9}),
                                   st_tensor("x", "F32", {3}, std::vector<float>{1.5f, -2.25f, 3.0f})};
  // Header padded to an 8-byte boundary, so "x" starts at an odd address.
  const fs::path p = dir.write("m.safetensors", safetensors_bytes(tensors));
  auto f = SafetensorsFile::open(p.string());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  Tensor x = f.value()->tensor("x").value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data_ptr()) % 4, 0u);
  EXPECT_EQ(x.data<float>()[0], 1.5f);
  EXPECT_EQ(x.data<float>()[1], -2.25f);
  EXPECT_EQ(x.data<float>()[2], 3.0f);
}

// ---- malformed files -----------------------------------------------------------------------

TEST(Safetensors, TruncatedFilesFailAtEveryCutPoint) {
  const std::vector<StTensor> tensors = sample_tensors();
  const std::string full = safetensors_bytes(tensors);
  const uint64_t header_len = full.size() - data_of(tensors).size() - 8;
  struct Cut {
    size_t size;
    const char* needle;
  };
  for (const Cut& cut : std::vector<Cut>{{0, "too short"}, {3, "too short"}, {7, "too short"},
                                         {8, "runs past the end"}, {8 + header_len / 2, "runs past the end"},
                                         {8 + header_len - 1, "runs past the end"},
                                         {8 + header_len, "run past the data region"},
                                         {full.size() - 1, "d.ids"}}) {
    SCOPED_TRACE(cut.size);
    expect_open_error(full.substr(0, cut.size), StatusCode::kDataLoss, cut.needle);
  }
}

TEST(Safetensors, RejectsBadHeaderLengths) {
  expect_open_error(u64_le(1000) + "{}", StatusCode::kDataLoss, "runs past the end");
  expect_open_error(u64_le(1ull << 63) + "{}", StatusCode::kDataLoss, "exceeds the limit");
  expect_open_error(u64_le(~0ull) + "{}", StatusCode::kDataLoss, "exceeds the limit");
}

TEST(Safetensors, RejectsHeadersThatAreNotAJsonObject) {
  expect_open_error(file_bytes("{\"a\": {\"dtype\": ", ""), StatusCode::kDataLoss, "not valid JSON");
  expect_open_error(file_bytes("\xff\xfe garbage", ""), StatusCode::kDataLoss, "not valid JSON");
  expect_open_error(file_bytes("[1, 2, 3]", ""), StatusCode::kDataLoss, "JSON object");
  expect_open_error(file_bytes(std::string(100000, '[') + std::string(100000, ']'), ""), StatusCode::kDataLoss,
                    "nests deeper");
  expect_open_error(file_bytes("{\"__metadata__\": [1]}", ""), StatusCode::kDataLoss, "__metadata__");
  expect_open_error(file_bytes("{\"w\": 5}", ""), StatusCode::kDataLoss, "'w'");
}

TEST(Safetensors, RejectsUnsupportedAndUnknownDtypes) {
  for (const char* dtype : {"F64", "F8_E8M0", "F8_E5M2", "BOOL", "I16", "U64"}) {
    SCOPED_TRACE(dtype);
    std::vector<StTensor> tensors = {{"t.weight", dtype, {2}, std::vector<uint8_t>(16)}};
    json h = header_for(tensors);
    h["t.weight"]["data_offsets"] = {0, 16};
    expect_open_error(file_bytes(h.dump(), std::string(16, '\0')), StatusCode::kUnimplemented, "t.weight");
    expect_open_error(file_bytes(h.dump(), std::string(16, '\0')), StatusCode::kUnimplemented, dtype);
  }
  std::vector<StTensor> tensors = {{"t.weight", "FLOAT99", {2}, std::vector<uint8_t>(8)}};
  expect_open_error(safetensors_bytes(tensors), StatusCode::kDataLoss, "FLOAT99");
  tensors[0].dtype = "f32";  // safetensors dtypes are upper case
  expect_open_error(safetensors_bytes(tensors), StatusCode::kDataLoss, "'f32'");
}

TEST(Safetensors, RejectsBadEntries) {
  const std::vector<StTensor> tensors = sample_tensors();
  const json good = header_for(tensors);
  const std::string data = data_of(tensors);
  auto with = [&](const std::function<void(json&)>& edit) {
    json h = good;
    edit(h);
    return file_bytes(h.dump(), data);
  };
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    SCOPED_TRACE(field);
    expect_open_error(with([&](json& h) { h["c.bias"].erase(field); }), StatusCode::kDataLoss, field);
    expect_open_error(with([&](json& h) { h["c.bias"].erase(field); }), StatusCode::kDataLoss, "c.bias");
  }
  expect_open_error(with([](json& h) { h["c.bias"]["dtype"] = 4; }), StatusCode::kDataLoss, "dtype");
  expect_open_error(with([](json& h) { h["c.bias"]["shape"] = {-1, -5}; }), StatusCode::kDataLoss, "non-negative");
  expect_open_error(with([](json& h) { h["c.bias"]["shape"] = "5"; }), StatusCode::kDataLoss, "'shape'");
  expect_open_error(with([](json& h) { h["c.bias"]["shape"] = {2.5}; }), StatusCode::kDataLoss, "'shape'");
  expect_open_error(with([](json& h) { h["c.bias"]["shape"] = {1ull << 40, 1ull << 40}; }), StatusCode::kDataLoss,
                    "too large");
  expect_open_error(with([](json& h) { h["c.bias"]["data_offsets"] = {4}; }), StatusCode::kDataLoss, "[begin, end]");
  expect_open_error(with([](json& h) { h["c.bias"]["data_offsets"] = {-4, 16}; }), StatusCode::kDataLoss,
                    "[begin, end]");
  const uint64_t c_begin = good["c.bias"]["data_offsets"][0];
  expect_open_error(with([&](json& h) { h["c.bias"]["data_offsets"] = {c_begin + 20, c_begin}; }),
                    StatusCode::kDataLoss, "end before");
  expect_open_error(with([&](json& h) { h["c.bias"]["data_offsets"] = {data.size(), data.size() + 20}; }),
                    StatusCode::kDataLoss, "past the data region");
  // Size mismatch: 5 floats need 20 bytes.
  expect_open_error(with([&](json& h) { h["c.bias"]["shape"] = {4}; }), StatusCode::kDataLoss, "needs 16");
  expect_open_error(with([&](json& h) { h["c.bias"]["dtype"] = "F16"; }), StatusCode::kDataLoss, "needs 10");
  // Overlapping tensors: b.weight re-described to cover a.weight's bytes too.
  expect_open_error(with([&](json& h) {
                      h["b.weight"]["data_offsets"] = {0, 12};
                      h["b.weight"]["shape"] = {2, 3};
                    }),
                    StatusCode::kDataLoss, "overlap");
}

TEST(Safetensors, MissingFileAndNonFiles) {
  TempDir dir;
  auto f = SafetensorsFile::open((dir.path() / "absent.safetensors").string());
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("absent.safetensors"), std::string::npos);
  f = SafetensorsFile::open(dir.path().string());
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("regular file"), std::string::npos);
}

TEST(Safetensors, AcceptsAnEmptyHeader) {
  TempDir dir;
  auto f = SafetensorsFile::open(dir.write("e.safetensors", file_bytes("{}", "")).string());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_TRUE(f.value()->names().empty());
}

TEST(Safetensors, CorruptedCopiesOfTheFixtureNeverCrash) {
  std::ifstream in(kFixture, std::ios::binary);
  const std::string full((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(full.size(), 100u);
  TempDir dir;
  const fs::path p = dir.path() / "corrupt.safetensors";
  auto write = [&](const std::string& bytes) {
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  // Truncations fail cleanly (every cut in the length prefix, then every 7th byte, and the last).
  std::vector<size_t> cuts;
  for (size_t cut = 0; cut < full.size(); cut += cut < 16 ? 1 : 7) cuts.push_back(cut);
  cuts.push_back(full.size() - 1);
  for (size_t cut : cuts) {
    write(full.substr(0, cut));
    auto f = SafetensorsFile::open(p.string());
    ASSERT_FALSE(f.is_ok()) << "cut at " << cut;
    ASSERT_EQ(f.status().code(), StatusCode::kDataLoss) << f.status().to_string();
  }
  // Random byte changes either fail with a status or give a file whose tensors all read.
  std::mt19937 rng(3);
  int failures = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes = full;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    write(bytes);
    auto f = SafetensorsFile::open(p.string());
    if (!f.is_ok()) {
      ++failures;
      EXPECT_NE(f.status().code(), StatusCode::kOk);
      continue;
    }
    for (const std::string& name : f.value()->names()) {
      StatusOr<Tensor> t = f.value()->tensor(name);
      ASSERT_TRUE(t.is_ok()) << t.status().to_string();
      ASSERT_EQ(t->nbytes(), f.value()->find(name)->end - f.value()->find(name)->begin);
    }
  }
  EXPECT_GT(failures, 20);  // header edits are caught
}

// ---- open_safetensors ------------------------------------------------------------------------

void expect_status(const Status& s, StatusCode code, const std::vector<std::string>& needles) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (const std::string& n : needles)
    EXPECT_NE(s.message().find(n), std::string::npos) << "message '" << s.message() << "' does not mention '" << n << "'";
}

TEST(WeightSource, SingleFileChecksShapesAndNames) {
  TempDir dir;
  dir.write("model.safetensors", safetensors_bytes(sample_tensors()));
  dir.write("config.json", "{}");
  auto src = open_safetensors(dir.path().string());
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  WeightSource& w = *src.value();
  EXPECT_EQ(w.names(), (std::vector<std::string>{"a.weight", "b.weight", "c.bias", "d.ids"}));
  EXPECT_NE(w.describe().find(dir.path().string()), std::string::npos) << w.describe();
  EXPECT_TRUE(w.has("a.weight"));
  EXPECT_FALSE(w.has("lm_head.weight"));
  StatusOr<Tensor> a = w.get("a.weight", {3, 4});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->dtype(), DType::kF32);
  EXPECT_EQ(std::memcmp(a->data_ptr(), sample_tensors()[0].bytes.data(), a->nbytes()), 0);

  StatusOr<Tensor> wrong = w.get("a.weight", {4, 3});
  ASSERT_FALSE(wrong.is_ok());
  expect_status(wrong.status(), StatusCode::kInvalidArgument,
                {"tensor 'a.weight'", "has shape [3, 4] but the model expects [4, 3]"});
  StatusOr<Tensor> missing = w.get("lm_head.weight", {3, 4});
  ASSERT_FALSE(missing.is_ok());
  expect_status(missing.status(), StatusCode::kNotFound, {"lm_head.weight", w.describe()});
}

TEST(WeightSource, ShardedIndexOpensEachShardOnce) {
  TempDir dir;
  std::vector<StTensor> all = sample_tensors();
  dir.write("model-00001-of-00002.safetensors", safetensors_bytes({all[0], all[1]}));
  dir.write("model-00002-of-00002.safetensors", safetensors_bytes({all[2], all[3]}));
  json index = {{"metadata", {{"total_size", 100}}},
                {"weight_map",
                 {{"a.weight", "model-00001-of-00002.safetensors"},
                  {"b.weight", "model-00001-of-00002.safetensors"},
                  {"c.bias", "model-00002-of-00002.safetensors"}}}};  // d.ids left out of the index
  dir.write("model.safetensors.index.json", index.dump());
  auto src = open_safetensors(dir.path().string());
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_NE(src.value()->describe().find("(2 files)"), std::string::npos) << src.value()->describe();
  EXPECT_EQ(src.value()->names(), (std::vector<std::string>{"a.weight", "b.weight", "c.bias", "d.ids"}));
  for (const StTensor& st : all) {
    StatusOr<Tensor> t = src.value()->get(st.name, st.shape);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(std::memcmp(t->data_ptr(), st.bytes.data(), st.bytes.size()), 0) << st.name;
  }
  StatusOr<Tensor> wrong = src.value()->get("c.bias", {6});
  ASSERT_FALSE(wrong.is_ok());
  expect_status(wrong.status(), StatusCode::kInvalidArgument, {"model-00002-of-00002.safetensors", "[5]", "[6]"});

  // A tensor the index places in a shard that does not hold it.
  index["weight_map"]["z.weight"] = "model-00002-of-00002.safetensors";
  dir.write("model.safetensors.index.json", index.dump());
  src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kDataLoss, {"z.weight", "model-00002-of-00002.safetensors"});

  // A shard file that is not there.
  index["weight_map"].erase("z.weight");
  index["weight_map"]["c.bias"] = "model-00003-of-00003.safetensors";
  dir.write("model.safetensors.index.json", index.dump());
  src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kNotFound, {"model-00003-of-00003.safetensors", "c.bias"});

  index["weight_map"]["c.bias"] = "../model-00002-of-00002.safetensors";
  dir.write("model.safetensors.index.json", index.dump());
  src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kDataLoss, {"inside the model directory"});

  dir.write("model.safetensors.index.json", "{\"weight_map\": ");
  src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kDataLoss, {"model.safetensors.index.json", "not valid JSON"});

  dir.write("model.safetensors.index.json", "{\"metadata\": {}}");
  src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kDataLoss, {"weight_map"});

  // A corrupt shard reports the shard's own problem.
  index["weight_map"]["c.bias"] = "model-00002-of-00002.safetensors";
  dir.write("model.safetensors.index.json", index.dump());
  dir.write("model-00002-of-00002.safetensors", "short");
  src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kDataLoss, {"model-00002-of-00002.safetensors", "too short"});
}

TEST(WeightSource, ScansADirectoryWithoutIndex) {
  TempDir dir;
  std::vector<StTensor> all = sample_tensors();
  dir.write("first.safetensors", safetensors_bytes({all[0]}));
  dir.write("second.safetensors", safetensors_bytes({all[1], all[2]}));
  auto src = open_safetensors(dir.path().string());
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ(src.value()->names(), (std::vector<std::string>{"a.weight", "b.weight", "c.bias"}));
  EXPECT_TRUE(src.value()->get("b.weight", {2, 3}).is_ok());

  dir.write("third.safetensors", safetensors_bytes({all[2]}));  // c.bias twice
  src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kDataLoss, {"c.bias", "second.safetensors", "third.safetensors"});

  // A single file path works too.
  src = open_safetensors((dir.path() / "first.safetensors").string());
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ(src.value()->names(), std::vector<std::string>{"a.weight"});
}

TEST(WeightSource, EmptyOrMissingDirectory) {
  TempDir dir;
  auto src = open_safetensors(dir.path().string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kNotFound, {"no *.safetensors", dir.path().string()});
  src = open_safetensors((dir.path() / "nope").string());
  ASSERT_FALSE(src.is_ok());
  expect_status(src.status(), StatusCode::kNotFound, {"nope"});
}

// ---- dummy weights -------------------------------------------------------------------------

std::vector<float> as_floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(t.data_ptr(), t.dtype(), out.data(), out.size());
  return out;
}

TEST(DummyWeights, DeterministicInSeedAndName) {
  auto w1 = make_dummy_weights(DType::kF32, 42, 0.05f);
  auto w2 = make_dummy_weights(DType::kF32, 42, 0.05f);
  auto w3 = make_dummy_weights(DType::kF32, 43, 0.05f);
  Tensor a = w1->get("layers.0.q.weight", {64, 32}).value();
  EXPECT_EQ(a.shape(), (Shape{64, 32}));
  EXPECT_EQ(a.dtype(), DType::kF32);
  EXPECT_EQ(as_floats(a), as_floats(w2->get("layers.0.q.weight", {64, 32}).value()));
  EXPECT_EQ(as_floats(a), as_floats(w1->get("layers.0.q.weight", {64, 32}).value()));  // asked again
  EXPECT_NE(as_floats(a), as_floats(w1->get("layers.0.k.weight", {64, 32}).value()));
  EXPECT_NE(as_floats(a), as_floats(w3->get("layers.0.q.weight", {64, 32}).value()));
  EXPECT_TRUE(w1->has("anything"));
  EXPECT_EQ(w1->names(), (std::vector<std::string>{"layers.0.k.weight", "layers.0.q.weight"}));
  StatusOr<Tensor> bad = w1->get("x", {-1, 4});
  ASSERT_FALSE(bad.is_ok());
  expect_status(bad.status(), StatusCode::kInvalidArgument, {"'x'", "negative"});
}

TEST(DummyWeights, UniformInRangeWithTheRightMoments) {
  const float scale = 0.02f;
  auto w = make_dummy_weights(DType::kF32, 1, scale);
  // 4M elements: large enough to be filled by several threads.
  const std::vector<float> v = as_floats(w->get("big", {1024, 4096}).value());
  double sum = 0, sum_sq = 0;
  for (float x : v) {
    ASSERT_GE(x, -scale);
    ASSERT_LE(x, scale);
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size());
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  const double expected_var = scale * scale / 3.0;  // U(-s, s)
  EXPECT_LT(std::abs(mean), 6 * std::sqrt(expected_var / n));
  EXPECT_NEAR(var, expected_var, 0.01 * expected_var);
  // Elements depend only on (seed, name, index): a smaller request with the same name is a prefix,
  // whatever the threading.
  const std::vector<float> small = as_floats(w->get("big", {1000}).value());
  EXPECT_TRUE(std::equal(small.begin(), small.end(), v.begin()));
  const std::vector<float> tail = as_floats(w->get("big", {4096 * 1024}).value());
  EXPECT_EQ(tail, v);
}

TEST(DummyWeights, HalfPrecisionIsTheRoundedFloatStream) {
  auto f32 = make_dummy_weights(DType::kF32, 9, 0.5f);
  auto bf = make_dummy_weights(DType::kBF16, 9, 0.5f);
  auto hf = make_dummy_weights(DType::kF16, 9, 0.5f);
  const std::vector<float> ref = as_floats(f32->get("w", {3, 333}).value());
  Tensor b = bf->get("w", {3, 333}).value();
  Tensor h = hf->get("w", {3, 333}).value();
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(h.dtype(), DType::kF16);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(b.data<bf16>()[i].bits, f32_to_bf16(ref[i]).bits) << i;
    ASSERT_EQ(h.data<f16>()[i].bits, f32_to_f16(ref[i]).bits) << i;
  }
}

// --dummy-weight-type: matrices whose rows are whole blocks become random blocks of that type
// (deterministic in seed and name, values within ~scale); the rest stays float.
TEST(DummyWeights, QuantizedMatrices) {
  auto w = make_dummy_weights(DType::kBF16, 4, 0.5f, DType::kQ4_K);
  Tensor q = w->get("m", {8, 512}).value();
  EXPECT_EQ(q.dtype(), DType::kQ4_K);
  EXPECT_EQ(q.nbytes(), 8u * 2 * 144);
  Tensor again = make_dummy_weights(DType::kBF16, 4, 0.5f, DType::kQ4_K)->get("m", {8, 512}).value();
  EXPECT_EQ(std::memcmp(q.data_ptr(), again.data_ptr(), q.nbytes()), 0);
  Tensor other = w->get("n", {8, 512}).value();
  EXPECT_NE(std::memcmp(q.data_ptr(), other.data_ptr(), q.nbytes()), 0);
  const Tensor values = dequantize(q);
  float amax = 0;
  for (int64_t i = 0; i < values.numel(); ++i) amax = std::max(amax, std::fabs(values.data<float>()[i]));
  EXPECT_GT(amax, 0.05f);
  EXPECT_LE(amax, 1.0f);  // fill_random_blocks sizes the scales to ~scale
  EXPECT_EQ(w->get("v", {512}).value().dtype(), DType::kBF16);
  EXPECT_EQ(w->get("odd", {8, 96}).value().dtype(), DType::kBF16);  // 96 is not a whole Q4_K block
}

}  // namespace
}  // namespace rlm
