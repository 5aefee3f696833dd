// Dequantization against values from gguf.quants.dequantize: the committed fixture
// (tools/make_gguf_fixtures.py) and random blocks of every supported type, written at test time
// by tools/make_gguf_quant_fixtures.py.
#include "formats/gguf_dequant.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "gguf_test_util.h"

namespace rlm {
namespace {

const std::string kDataDir = std::string(RADIXLM_SOURCE_DIR) + "/tests/data/gguf/";

nlohmann::json expected() {
  std::ifstream in(kDataDir + "fixture_expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(GgufDequant, MatchesGgufPackageOnFixture) {
  auto j = expected();
  auto f = GgufFile::open(kDataDir + "fixture.gguf").value();
  int checked = 0;
  for (const auto& e : j["tensors"]) {
    if (!e.contains("values")) continue;
    const std::string name = e["name"];
    SCOPED_TRACE(name);
    const GgufTensorInfo* info = f->find_tensor(name);
    ASSERT_NE(info, nullptr);
    auto t = dequantize_tensor(*f, *info);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ(t->dtype(), DType::kF32);
    EXPECT_EQ(t->shape(), e["shape"].get<Shape>());
    const auto want = e["values"].get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(want.size()), t->numel());
    const float* got = t->data<float>();
    // Exact: the reference dequantization rounds like numpy (no FMA contraction).
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << "element " << i;
    ++checked;
  }
  EXPECT_GE(checked, 6);  // F32, F16, BF16, Q8_0, Q4_0, Q4_1 at least
}

TEST(GgufDequant, RejectsUnsupportedTypesWithTheirNames) {
  // A Q8_1 tensor (ggml type 9: an activation format, never a weight) in a minimal file.
  const std::string bytes = gguf_test::Builder().header(1, 0).tensor("t.q8_1", {32}, 9, 0).pad_to(32).zeros(64).bytes();
  auto f = gguf_test::open_bytes(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto r = dequantize_tensor(**f, *(*f)->find_tensor("t.q8_1"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("Q8_1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("t.q8_1"), std::string::npos) << r.status().message();
  // The fixture's Q5_0 tensor, once rejected, now dequantizes (its values are checked below).
  auto fixture = GgufFile::open(kDataDir + "fixture.gguf").value();
  EXPECT_TRUE(dequantize_tensor(*fixture, *fixture->find_tensor("t.q5_0")).is_ok());

  for (uint32_t id = 0; id < 64; ++id) {
    auto traits = ggml_type_traits(id);
    if (!traits) continue;
    const auto type = static_cast<GgmlType>(id);
    std::vector<uint8_t> data(static_cast<size_t>(traits->type_size));
    std::vector<float> out(static_cast<size_t>(traits->block_size));
    Status st = dequantize_to_f32(type, data, traits->block_size, out.data());
    EXPECT_EQ(st.is_ok(), gguf_can_dequantize(type)) << traits->name << ": " << st.to_string();
    EXPECT_EQ(gguf_can_dequantize(type), dtype_of_ggml_type(type).has_value()) << traits->name;
    if (auto dt = dtype_of_ggml_type(type)) {
      EXPECT_EQ(dtype_block_size(*dt), traits->block_size) << traits->name;
      EXPECT_EQ(static_cast<int64_t>(dtype_block_bytes(*dt)), traits->type_size) << traits->name;
    }
    if (!st.is_ok()) {
      EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
      EXPECT_NE(st.message().find(traits->name), std::string::npos) << st.message();
    }
  }
}

TEST(GgufDequant, ChecksSizes) {
  std::vector<uint8_t> block(34);
  std::vector<float> out(64);
  Status st = dequantize_to_f32(GgmlType::kQ8_0, block, 16, out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  st = dequantize_to_f32(GgmlType::kQ8_0, block, 64, out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("need 68 bytes, got 34"), std::string::npos) << st.message();
}

// Large tensors are split across threads; the result must equal block-by-block serial calls.
TEST(GgufDequant, ThreadedEqualsSerial) {
  std::mt19937 rng(11);
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ4_K}) {
    const auto traits = ggml_type_traits(static_cast<uint32_t>(type)).value();
    const int64_t num_blocks = (int64_t{1} << 22) / traits.block_size + 7;  // above the threading threshold
    std::vector<uint8_t> data(static_cast<size_t>(num_blocks * traits.type_size));
    // Finite scales so that values compare by ==.
    fill_random_blocks(*dtype_of_ggml_type(type), data.data(), num_blocks, rng(), 1.0f);
    const int64_t numel = num_blocks * traits.block_size;
    std::vector<float> all(static_cast<size_t>(numel)), serial(static_cast<size_t>(numel));
    ASSERT_TRUE(dequantize_to_f32(type, data, numel, all.data()).is_ok());
    const int64_t step = 1000;  // blocks per serial call, far below the threading threshold
    for (int64_t b = 0; b < num_blocks; b += step) {
      const int64_t n = std::min(step, num_blocks - b);
      std::span<const uint8_t> part(data.data() + b * traits.type_size, static_cast<size_t>(n * traits.type_size));
      ASSERT_TRUE(dequantize_to_f32(type, part, n * traits.block_size, serial.data() + b * traits.block_size).is_ok());
    }
    ASSERT_EQ(all, serial) << traits.name;
  }
}

// Random blocks of every supported type against gguf.quants.dequantize, bit for bit. The fixture is
// written at test time (the script is deterministic; nothing binary is committed).
class GgufDequantAllTypes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/gguf_quant_fixtures_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string cmd = std::string(RADIXLM_SOURCE_DIR) + "/.venv/bin/python " + RADIXLM_SOURCE_DIR +
                            "/tools/make_gguf_quant_fixtures.py --out " + dir_ + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string dir_;
};
std::string GgufDequantAllTypes::dir_;

TEST_F(GgufDequantAllTypes, BitExactWithGgufPackage) {
  std::ifstream in(dir_ + "/quant_blocks_expected.json");
  ASSERT_TRUE(in.good()) << dir_;
  const nlohmann::json index = nlohmann::json::parse(in);
  std::ifstream bin(dir_ + "/quant_blocks_expected.bin", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  auto f = GgufFile::open(dir_ + "/quant_blocks.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  std::set<std::string> types;
  for (const auto& e : index["tensors"]) {
    const std::string name = e["name"];
    SCOPED_TRACE(name);
    const GgufTensorInfo* info = (*f)->find_tensor(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(ggml_type_name(info->type), e["type"].get<std::string>());
    EXPECT_EQ(info->shape, e["shape"].get<Shape>());
    auto t = dequantize_tensor(**f, *info);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    const size_t offset = e["offset"].get<size_t>() * 4, bytes = t->nbytes();
    ASSERT_LE(offset + bytes, raw.size());
    const auto* want = reinterpret_cast<const uint32_t*>(raw.data() + offset);
    const auto* got = reinterpret_cast<const uint32_t*>(t->data_ptr());
    for (int64_t i = 0; i < t->numel(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "element " << i << ": " << t->data<float>()[i] << " vs "
                                 << reinterpret_cast<const float*>(want)[i];
    }
    // The same bytes as a tensor of the block dtype (what the model keeps), row by row.
    const DType dt = *dtype_of_ggml_type(info->type);
    std::span<const uint8_t> data = (*f)->tensor_data(*info);
    Tensor blocks = Tensor::from_blob(const_cast<uint8_t*>(data.data()), info->shape, dt, Device::cpu(), *f);
    EXPECT_EQ(blocks.nbytes(), data.size());
    Tensor rows = dequantize(blocks.slice(0, 1, info->shape[0]));
    ASSERT_EQ(std::memcmp(rows.data_ptr(), want + info->shape[1], rows.nbytes()), 0);
    types.insert(e["type"].get<std::string>());
  }
  EXPECT_EQ(types, (std::set<std::string>{"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K",
                                          "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"}));
}

TEST(GgufDequant, BlockDTypeTensors) {
  // Shapes count elements, storage holds blocks; slices and views stay on block boundaries.
  Tensor t = Tensor::empty({4, 512}, DType::kQ4_K);
  EXPECT_EQ(t.nbytes(), 4u * 2 * 144);
  EXPECT_EQ(static_cast<char*>(t.slice(0, 1, 3).data_ptr()) - static_cast<char*>(t.data_ptr()), 2 * 144);
  EXPECT_EQ(static_cast<char*>(t.slice(1, 256, 512).data_ptr()) - static_cast<char*>(t.data_ptr()), 144);
  EXPECT_THROW(t.slice(1, 0, 128), Error);
  EXPECT_THROW(t.view({8, 256}).view({2048, 1}), Error);
  EXPECT_THROW((void)t.element_size(), Error);
  EXPECT_THROW(t.to(DType::kF32), Error);
  EXPECT_EQ(parse_dtype("Q4_K").value(), DType::kQ4_K);
  EXPECT_EQ(parse_dtype("iq4_xs").value(), DType::kIQ4_XS);
  Tensor copy = t.clone();
  EXPECT_EQ(copy.nbytes(), t.nbytes());
}

}  // namespace
}  // namespace rlm
