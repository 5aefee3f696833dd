#include "dist/nccl_communicator.h"

#ifdef RADIXLM_WITH_NCCL
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "core/cuda_check.h"
#include "core/env.h"
#include "kernels/cuda/custom_all_reduce.h"
#endif

namespace rlm {

#ifndef RADIXLM_WITH_NCCL

bool nccl_compiled() { return false; }

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(TcpGroup& /*group*/, Device device,
                                                               bool /*one_shot*/) {
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

// The largest one-shot message: each rank reads size - 1 peers' copies, so the one-shot kernel
// beats NCCL's ring up to a size that shrinks with the group (docs/perf/tensor_parallel.md).
size_t one_shot_limit(int size) {
  return size <= 2 ? (size_t{8} << 20) : size <= 4 ? (size_t{2} << 20) : (size_t{1} << 20);
}

// This rank's one-shot buffer and every peer's, mapped over CUDA IPC (kernels/cuda/custom_all_reduce.h).
class OneShot {
 public:
  // Collective. Null when some rank cannot reach another's GPU directly (every rank agrees).
  static std::unique_ptr<OneShot> create(TcpGroup& group, Device device) {
    const int n = group.size();
    if (n > cuda::kCarMaxRanks) return nullptr;
    const std::vector<uint8_t> mine = {static_cast<uint8_t>(device.index)};
    const auto devices = group.all_gather(mine);
    bool ok = true;
    for (const auto& d : devices) ok = ok && d.size() == 1 && cuda::car_peer_access(device.index, d[0]);
    const auto oks = group.all_gather({static_cast<uint8_t>(ok ? 1 : 0)});
    for (const auto& o : oks) ok = ok && o.size() == 1 && o[0] == 1;
    if (!ok) return nullptr;
    std::unique_ptr<OneShot> s(new OneShot(device.index, group.rank(), n, one_shot_limit(n)));
    s->buffers_[group.rank()] = cuda::car_alloc(device.index, cuda::car_buffer_bytes(s->max_bytes_));
    const auto handles = group.all_gather(cuda::car_ipc_handle(device.index, s->buffers_[group.rank()]));
    for (int r = 0; r < n; ++r) {
      if (r != group.rank()) s->buffers_[r] = cuda::car_open_ipc(device.index, handles[r]);
    }
    group.barrier();  // every rank has mapped every buffer before any call
    return s;
  }
  ~OneShot() {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        cuda::car_free(device_, buffers_[r]);
      } else {
        cuda::car_close_ipc(device_, buffers_[r]);
      }
    }
  }
  size_t max_bytes() const { return max_bytes_; }
  // Every rank must take the same path for the same call: the test depends on the dtype, the size
  // and the pointer's alignment, which is the same on every rank (the same allocations and views
  // of the same shapes, from allocators that align to 256 bytes).
  bool fits(const Tensor& t) const { return cuda::car_fits(t.data_ptr(), t.numel(), t.dtype(), max_bytes_); }
  void all_reduce(const Tensor& t, void* stream) {
    cuda::car_all_reduce(device_, buffers_.data(), rank_, size_, max_bytes_, t.data_ptr(), t.numel(),
                         t.dtype(), stream);
  }
  // The same holds here: shapes, dtypes and alignments are the same on every rank.
  bool norm_fits(const Tensor& x, const Tensor& residual) const {
    return cuda::car_norm_fits(x.data_ptr(), residual.data_ptr(), x.size(0), x.size(1), size_, max_bytes_);
  }
  void all_reduce_add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                               void* stream) {
    cuda::car_all_reduce_add_rms_norm(device_, buffers_.data(), rank_, size_, max_bytes_, x.data<float>(),
                                      residual.data<float>(), x.size(0), x.size(1), weight.data_ptr(),
                                      weight.dtype(), eps, stream);
  }

 private:
  OneShot(int device, int rank, int size, size_t max_bytes)
      : device_(device),
        rank_(rank),
        size_(size),
        max_bytes_(max_bytes),
        buffers_(static_cast<size_t>(size), nullptr) {}
  int device_, rank_, size_;
  size_t max_bytes_;
  std::vector<void*> buffers_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(TcpGroup& group, Device device, ncclComm_t comm, std::unique_ptr<OneShot> one_shot)
      : group_(group), device_(device), comm_(comm), one_shot_(std::move(one_shot)) {
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclCommunicator() override {
    stop_ = true;
    watchdog_.join();
    ncclCommDestroy(comm_);
  }
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }

  void all_reduce_sum(const Tensor& t) override {
    check("all_reduce_sum", t);
    const bool one_shot = one_shot_ != nullptr && mode_ != AllReduceMode::kLibrary && one_shot_->fits(t);
    RLM_CHECK(one_shot || mode_ != AllReduceMode::kOneShot)
        << "all_reduce_sum: " << t.describe() << " does not fit the one-shot all-reduce";
    if (one_shot) {
      one_shot_->all_reduce(t, stream());
      return;
    }
    RLM_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                 ncclSum, comm_, stream()));
  }
  // RADIXLM_TP_FUSED_NORM=0: the all-reduce, then the norm (the fused path's same-run reference).
  // Read by each process; the one-shot group is one machine's ranks, which rank 0 starts with its
  // own environment, so every rank takes the same path.
  bool all_reduce_add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                               float eps) override {
    static const bool on = env_switch_on("RADIXLM_TP_FUSED_NORM");
    if (!on || one_shot_ == nullptr || mode_ == AllReduceMode::kLibrary) return false;
    check("all_reduce_add_rms_norm", x);
    check("all_reduce_add_rms_norm", residual);
    RLM_CHECK(x.dtype() == DType::kF32 && x.dim() == 2 && residual.shape() == x.shape() &&
              residual.dtype() == DType::kF32 && weight.device() == device_ && weight.dim() == 1 &&
              weight.size(0) == x.size(1) && weight.is_contiguous() && is_floating(weight.dtype()))
        << "all_reduce_add_rms_norm: x " << x.describe() << ", residual " << residual.describe()
        << ", weight " << weight.describe();
    if (!one_shot_->norm_fits(x, residual)) return false;
    one_shot_->all_reduce_add_rms_norm(x, residual, weight, eps, stream());
    return true;
  }
  size_t one_shot_max_bytes() const override { return one_shot_ == nullptr ? 0 : one_shot_->max_bytes(); }
  void set_all_reduce_mode(AllReduceMode mode) override {
    RLM_CHECK(mode != AllReduceMode::kOneShot || one_shot_ != nullptr)
        << "this group has no one-shot all-reduce";
    mode_ = mode;
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
  // Ends the process when a rank's control connection closes or NCCL reports an asynchronous
  // error: the step in flight can never finish (a collective or the one-shot all-reduce kernel
  // waits for the dead rank on the GPU), so nothing is waited for -- not even ncclCommAbort, which
  // frees device memory and so waits for the device, where the one-shot kernel spins forever.
  // Process exit tears the CUDA context down, spinning kernels included. The message has the form
  // of the engine's own (model_runner.cpp) for a group failure it sees first.
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
        const std::string why = gone >= 0
                                    ? str("tensor-parallel rank ", gone, " is gone (its connection closed)")
                                    : str("NCCL reported: ", ncclGetErrorString(async));
        std::fprintf(stderr,
                     "radixlm: the tensor-parallel group failed, exiting: %s (seen by rank %d's watchdog)\n",
                     why.c_str(), rank());
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  }

  TcpGroup& group_;
  Device device_;
  ncclComm_t comm_;
  std::unique_ptr<OneShot> one_shot_;  // null: NCCL only
  AllReduceMode mode_ = AllReduceMode::kAuto;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(TcpGroup& group, Device device,
                                                               bool one_shot) {
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
  std::unique_ptr<OneShot> shot = one_shot ? OneShot::create(group, device) : nullptr;
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(group, device, comm, std::move(shot)));
}

#endif

}  // namespace rlm
