#include "dist/communicator.h"

namespace rlm {

void all_gather_last_dim(Communicator& comm, const Tensor& in, const Tensor& out) {
  RLM_CHECK(in.dim() == 2 && out.dim() == 2 && out.size(0) == in.size(0) &&
            out.size(1) == in.size(1) * comm.size())
      << "all_gather_last_dim: in " << in.describe() << ", out " << out.describe();
  const int64_t m = in.size(0), k = in.size(1);
  Tensor stacked = Tensor::empty({comm.size(), m, k}, in.dtype(), in.device());
  comm.all_gather(in, stacked);
  for (int r = 0; r < comm.size(); ++r) out.slice(1, r * k, (r + 1) * k).copy_(stacked.select(0, r));
}

}  // namespace rlm
