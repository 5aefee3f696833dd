// Cascade attention end to end on the GPU with the `native` backend (f32 KV cache, so the greedy
// tokens must be the goldens'): the same scenarios as the CPU test (unit/cascade_serving_util.h).
#include "core/device.h"
#include "unit/cascade_serving_util.h"

namespace rlm {
namespace {

using testing::CascadeServingParams;

class CascadeServingCuda : public ::testing::TestWithParam<CascadeServingParams> {};

TEST_P(CascadeServingCuda, GreedyMatchesGoldenWithSharedPrefixes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  testing::run_cascade_serving(GetParam(), Device::cuda(0), "native");
}

INSTANTIATE_TEST_SUITE_P(Goldens, CascadeServingCuda, ::testing::ValuesIn(testing::cascade_serving_cases()),
                         [](const auto& info) { return testing::cascade_serving_name(info.param); });

}  // namespace
}  // namespace rlm
