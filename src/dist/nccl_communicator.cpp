#include "dist/nccl_communicator.h"

#ifdef RADIXLM_WITH_NCCL
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nccl.h>
#include <thread>

#include "core/cuda_check.h"
#endif

namespace rlm {

#ifndef RADIXLM_WITH_NCCL

bool nccl_compiled() { return false; }

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(TcpGroup& /*group*/, Device device) {
  return unimplemented(str("tensor parallelism on ", device.to_string(),
                           " needs NCCL, and radixlm was built without it (CMake did not find nccl.h / libnccl)"));
}

#else

bool nccl_compiled() { return true; }

namespace {

#define RLM_NCCL_CHECK(expr)                                                                          \
  do {                                                                                                \
    const ncclResult_t rlm_nccl_st_ = (expr);                                                         \
    if (rlm_nccl_st_ != ncclSuccess) {                                                                \
      throw GroupError(str(__FILE__, ":", __LINE__, ": NCCL call failed: ", #expr, ": ",              \
                           ncclGetErrorString(rlm_nccl_st_), " (", ncclGetLastError(nullptr), ")")); \
    }                                                                                                 \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    default: fail(str("NCCL: no type for ", dtype_name(t)));
  }
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(TcpGroup& group, Device device, ncclComm_t comm) : group_(group), device_(device), comm_(comm) {
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclCommunicator() override {
    stop_ = true;
    watchdog_.join();
    if (!aborted_) ncclCommDestroy(comm_);
  }
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }

  void all_reduce_sum(const Tensor& t) override {
    check("all_reduce_sum", t);
    RLM_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                 ncclSum, comm_, stream()));
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    check("all_gather", in);
    check("all_gather", out);
    RLM_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * size())
        << "all_gather: out " << out.describe() << " must hold " << size() << " x " << in.describe();
    RLM_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()),
                                 nccl_type(in.dtype()), comm_, stream()));
  }
  void broadcast_bytes(std::vector<uint8_t>& bytes) override { group_.broadcast(bytes); }
  void barrier() override {
    RLM_CUDA_CHECK(cudaStreamSynchronize(stream()));
    group_.barrier();
  }

 private:
  cudaStream_t stream() const { return static_cast<cudaStream_t>(cuda_stream(device_.index)); }
  void check(const char* op, const Tensor& t) const {
    RLM_CHECK(t.device() == device_ && t.is_contiguous())
        << op << ": NCCL takes contiguous tensors on " << device_.to_string() << ", got " << t.describe();
  }
  // Aborts the communicator when a rank's control connection closes or NCCL reports an
  // asynchronous error: pending collectives then return instead of waiting forever.
  void watch() {
    while (!stop_) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      const int gone = group_.closed_peer(100);
      if (stop_) return;
      // A connection closed right after its last message (rank 0's shutdown) is not a failure:
      // give the main thread time to read it and stop the watchdog.
      for (int i = 0; gone >= 0 && i < 20 && !stop_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (stop_) return;
      if (gone >= 0 || async != ncclSuccess) {
        std::fprintf(stderr, "radixlm: tensor-parallel rank %d: %s; aborting the NCCL communicator\n", rank(),
                     gone >= 0 ? str("rank ", gone, " is gone").c_str() : ncclGetErrorString(async));
        aborted_ = true;
        ncclCommAbort(comm_);
        std::_Exit(1);
      }
    }
  }

  TcpGroup& group_;
  Device device_;
  ncclComm_t comm_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborted_{false};
  std::thread watchdog_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(TcpGroup& group, Device device) {
  RLM_CHECK(device.is_cuda()) << "make_nccl_communicator on " << device.to_string();
  ncclUniqueId id;
  std::vector<uint8_t> bytes(sizeof(id));
  if (group.rank() == 0) {
    const ncclResult_t st = ncclGetUniqueId(&id);
    if (st != ncclSuccess) return internal_error(str("ncclGetUniqueId: ", ncclGetErrorString(st)));
    std::memcpy(bytes.data(), &id, sizeof(id));
  }
  group.broadcast(bytes);
  if (bytes.size() != sizeof(id)) return internal_error("NCCL unique id of the wrong size from rank 0");
  std::memcpy(&id, bytes.data(), sizeof(id));
  RLM_CUDA_CHECK(cudaSetDevice(device.index));
  ncclComm_t comm = nullptr;
  const ncclResult_t st = ncclCommInitRank(&comm, group.size(), id, group.rank());
  if (st != ncclSuccess) {
    return internal_error(str("ncclCommInitRank (rank ", group.rank(), " of ", group.size(), " on ",
                              device.to_string(), "): ", ncclGetErrorString(st)));
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(group, device, comm));
}

#endif

}  // namespace rlm
