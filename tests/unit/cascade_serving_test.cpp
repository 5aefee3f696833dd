// Cascade attention end to end on the CPU engine (see unit/cascade_serving_util.h).
#include "unit/cascade_serving_util.h"

namespace rlm {
namespace {

using testing::CascadeServingParams;

class CascadeServing : public ::testing::TestWithParam<CascadeServingParams> {};

TEST_P(CascadeServing, GreedyMatchesGoldenWithSharedPrefixes) {
  testing::run_cascade_serving(GetParam(), Device::cpu(), "cpu");
}

INSTANTIATE_TEST_SUITE_P(Goldens, CascadeServing, ::testing::ValuesIn(testing::cascade_serving_cases()),
                         [](const auto& info) { return testing::cascade_serving_name(info.param); });

}  // namespace
}  // namespace rlm
