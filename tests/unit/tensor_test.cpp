#include "core/tensor.h"

#include <gtest/gtest.h>

#include <random>

#include "core/status.h"

namespace rlm {
namespace {

TEST(Tensor, EmptyHasContiguousStrides) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::kF32);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4] cpu");
}

TEST(Tensor, SliceSharesStorageWithoutCopy) {
  Tensor t = Tensor::empty({4, 5}, DType::kF32);
  for (int i = 0; i < 20; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor s = t.slice(1, 1, 4);  // columns 1..3
  EXPECT_EQ(s.shape(), (Shape{4, 3}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.storage().get(), t.storage().get());
  EXPECT_EQ(s.at<float>({2, 0}), 11.0f);
  s.at<float>({0, 0}) = -1.0f;
  EXPECT_EQ(t.at<float>({0, 1}), -1.0f);
  Tensor c = s.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage().get(), t.storage().get());
  EXPECT_EQ(c.at<float>({3, 2}), 18.0f);
}

TEST(Tensor, SelectViewTransposeUnsqueeze) {
  Tensor t = Tensor::empty({2, 3}, DType::kI32);
  for (int i = 0; i < 6; ++i) t.data<int32_t>()[i] = i;
  EXPECT_EQ(t.select(0, 1).at<int32_t>({2}), 5);
  EXPECT_EQ(t.view({3, 2}).at<int32_t>({2, 1}), 5);
  EXPECT_EQ(t.view({-1}).shape(), (Shape{6}));
  EXPECT_EQ(t.transpose(0, 1).at<int32_t>({2, 1}), 5);
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_TRUE(t.unsqueeze(1).is_contiguous());
}

TEST(Tensor, ChecksNameTheOffendingShape) {
  Tensor t = Tensor::empty({2, 3}, DType::kF32);
  try {
    (void)t.view({4, 2});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.slice(1, 2, 5), Error);
  EXPECT_THROW((void)t.transpose(0, 1).view({6}), Error);
  EXPECT_THROW((void)t.data<int32_t>(), Error);
  EXPECT_THROW((void)t.size(2), Error);
  EXPECT_EQ(t.size(-1), 3);
  // A shape whose element count (and so byte count) would wrap around is refused, not allocated
  // at its wrapped size; the message names the shape.
  try {
    (void)Tensor::empty({int64_t{1} << 31, int64_t{1} << 31, 8}, DType::kF32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too many elements"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)Tensor::empty({int64_t{1} << 62, 4}, DType::kF32), Error);
}

TEST(Tensor, ConvertsFloatFormatsRoundTrip) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> v(1000);
  for (auto& x : v) x = dist(rng);
  Tensor f = Tensor::from_vector(v);
  Tensor b = f.to(DType::kBF16);
  Tensor h = f.to(DType::kF16);
  Tensor b2 = b.to(DType::kF32);
  Tensor h2 = h.to(DType::kF32);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(b2.data<float>()[i], v[i], std::abs(v[i]) * (1.0f / 256) + 1e-30f);
    EXPECT_NEAR(h2.data<float>()[i], v[i], std::abs(v[i]) * (1.0f / 2048) + 6e-8f);
    // Converting the rounded values again is exact.
    EXPECT_EQ(f32_to_bf16(b2.data<float>()[i]).bits, b.data<bf16>()[i].bits);
    EXPECT_EQ(f32_to_f16(h2.data<float>()[i]).bits, h.data<f16>()[i].bits);
  }
}

TEST(DType, F16EdgeCases) {
  EXPECT_EQ(f32_to_f16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f).bits, 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16(5.960464477539063e-08f).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_to_f32(f16{0x0001}), 5.960464477539063e-08f);
  EXPECT_EQ(f16_to_f32(f16{0x3c00}), 1.0f);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_EQ(f32_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  // Exhaustive: every finite f16 converts to f32 and back unchanged.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    f16 h{static_cast<uint16_t>(b)};
    float f = f16_to_f32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f).bits, h.bits) << std::hex << b;
  }
}

TEST(Tensor, StridedConvertingCopy) {
  Tensor t = Tensor::empty({3, 4}, DType::kF32);
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f;
  Tensor dst = Tensor::zeros({4, 3}, DType::kBF16);
  dst.copy_(t.transpose(0, 1));
  EXPECT_EQ(bf16_to_f32(dst.at<bf16>({1, 2})), 4.5f);
  EXPECT_THROW(dst.copy_(t), Error);  // shape mismatch
}

TEST(Status, OrCarriesValueOrError) {
  StatusOr<int> ok = 5;
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(ok.value(), 5);
  StatusOr<int> bad = invalid_argument("nope");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THROW((void)bad.value(), Error);
  EXPECT_EQ(parse_dtype("bfloat16").value(), DType::kBF16);
  EXPECT_FALSE(parse_dtype("float8").is_ok());
}

}  // namespace
}  // namespace rlm
