// Dequantization against values from gguf.quants.dequantize (tools/make_gguf_fixtures.py).
#include "formats/gguf_dequant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

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
    // Plain types are exact; block types allow one float32 rounding of q*d (+m) (FMA contraction).
    const bool plain = info->type == GgmlType::kF32 || info->type == GgmlType::kF16 || info->type == GgmlType::kBF16;
    for (size_t i = 0; i < want.size(); ++i) {
      const double tol = plain ? 0.0 : 1e-6 * std::fabs(want[i]) + 1e-12;
      ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
    }
    ++checked;
  }
  EXPECT_GE(checked, 6);  // F32, F16, BF16, Q8_0, Q4_0, Q4_1 at least
}

TEST(GgufDequant, RejectsUnsupportedTypesWithTheirNames) {
  auto f = GgufFile::open(kDataDir + "fixture.gguf").value();
  const GgufTensorInfo* q5 = f->find_tensor("t.q5_0");
  ASSERT_NE(q5, nullptr);
  auto r = dequantize_tensor(*f, *q5);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("Q5_0"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("t.q5_0"), std::string::npos) << r.status().message();

  for (uint32_t id = 0; id < 64; ++id) {
    auto traits = ggml_type_traits(id);
    if (!traits) continue;
    const auto type = static_cast<GgmlType>(id);
    std::vector<uint8_t> data(static_cast<size_t>(traits->type_size));
    std::vector<float> out(static_cast<size_t>(traits->block_size));
    Status st = dequantize_to_f32(type, data, traits->block_size, out.data());
    EXPECT_EQ(st.is_ok(), gguf_can_dequantize(type)) << traits->name << ": " << st.to_string();
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
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1}) {
    const auto traits = ggml_type_traits(static_cast<uint32_t>(type)).value();
    const int64_t num_blocks = (1 << 18) + 7;
    std::vector<uint8_t> data(static_cast<size_t>(num_blocks * traits.type_size));
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    // Keep the f16 scales finite (exponent bits below all-ones) so values compare by ==.
    for (int64_t b = 0; b < num_blocks; ++b) {
      uint8_t* block = data.data() + b * traits.type_size;
      block[1] &= 0x3f;
      if (type == GgmlType::kQ4_1) block[3] &= 0x3f;
    }
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

}  // namespace
}  // namespace rlm
