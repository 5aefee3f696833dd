#include "kernels/cuda/cuda_graph.h"

#include <vector>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/cuda_utils.cuh"

namespace rlm::cuda {
namespace {

struct PadCopies {
  PadCopy items[kMaxPadCopies];
};

// Grid (blocks over n_total, num_copies).
__global__ void copy_with_padding_kernel(PadCopies copies, int64_t n_real, int64_t n_total) {
  const PadCopy& c = copies.items[blockIdx.y];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    c.dst[i] = i < n_real ? c.src[i] : c.pad;
  }
}

}  // namespace

CudaGraph::~CudaGraph() {
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

void CudaGraph::begin_capture() {
  RLM_CHECK(!capturing_ && exec_ == nullptr) << "CudaGraph::begin_capture on a graph that is captured or capturing";
  CudaContext& ctx = CudaContext::get(device_);
  ctx.on_capture_begin();
  RLM_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(ctx.stream()), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
}

void CudaGraph::end_capture() {
  RLM_CHECK(capturing_) << "CudaGraph::end_capture without begin_capture";
  CudaContext& ctx = CudaContext::get(device_);
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(ctx.stream()), &graph);
  capturing_ = false;
  ctx.on_capture_end();
  if (e != cudaSuccess || graph == nullptr) {
    (void)cudaGetLastError();
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    fail(str("CUDA graph capture failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
             "); an op synchronised with the host or used another stream while capturing"));
  }
  size_t n = 0;
  (void)cudaGraphGetNodes(graph, nullptr, &n);
  num_nodes_ = static_cast<int64_t>(n);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  RLM_CHECK(ie == cudaSuccess) << "cudaGraphInstantiate: " << cudaGetErrorString(ie);
  exec_ = exec;
}

void CudaGraph::abort_capture() noexcept {
  if (!capturing_) return;
  CudaContext& ctx = CudaContext::get(device_);
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(static_cast<cudaStream_t>(ctx.stream()), &graph);
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
  capturing_ = false;
  try {
    ctx.on_capture_end();
  } catch (...) {
  }
}

void CudaGraph::replay() const {
  RLM_CHECK(exec_ != nullptr) << "CudaGraph::replay before a successful capture";
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device_).stream());
  RLM_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream));
}

void copy_with_padding(int device, const PadCopy* copies, int num_copies, int64_t n_real, int64_t n_total) {
  RLM_CHECK(num_copies > 0 && num_copies <= kMaxPadCopies) << "copy_with_padding: " << num_copies << " arrays";
  RLM_CHECK(0 <= n_real && n_real <= n_total) << "copy_with_padding: " << n_real << " of " << n_total;
  if (n_total == 0) return;
  PadCopies p;
  for (int i = 0; i < num_copies; ++i) {
    RLM_CHECK(copies[i].dst != nullptr && (n_real == 0 || copies[i].src != nullptr)) << "copy_with_padding: null array";
    p.items[i] = copies[i];
  }
  const auto stream = static_cast<cudaStream_t>(CudaContext::get(device).stream());
  const dim3 grid(grid_for(n_total), static_cast<unsigned>(num_copies));
  copy_with_padding_kernel<<<grid, kBlock, 0, stream>>>(p, n_real, n_total);
  RLM_CUDA_CHECK_LAUNCH();
}

}  // namespace rlm::cuda
