#include "core/async_download.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/check.h"

#ifdef RADIXLM_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace rlm {

#ifdef RADIXLM_WITH_CUDA
namespace {

struct DownloadPool {
  std::mutex mutex;
  std::vector<std::pair<void*, size_t>> blocks;  // free pinned blocks and their sizes
  std::vector<cudaEvent_t> events;               // free events
};

DownloadPool& download_pool() {
  static DownloadPool* pool = new DownloadPool();  // never destroyed: downloads may outlive statics
  return *pool;
}

}  // namespace
#endif

AsyncDownload::AsyncDownload(const void* src, Device device, size_t nbytes) : device_(device) {
  if (device.is_cpu()) {
    capacity_ = std::max<size_t>(nbytes, 1);
    host_ = std::malloc(capacity_);
    RLM_CHECK(host_ != nullptr) << "AsyncDownload: no memory for " << nbytes << " bytes";
    if (nbytes > 0) std::memcpy(host_, src, nbytes);
    waited_ = true;
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  DownloadPool& pool = download_pool();
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    auto fits = std::find_if(pool.blocks.begin(), pool.blocks.end(), [&](const auto& b) { return b.second >= nbytes; });
    if (fits != pool.blocks.end()) {
      host_ = fits->first;
      capacity_ = fits->second;
      pool.blocks.erase(fits);
    }
    if (!pool.events.empty()) {
      event = pool.events.back();
      pool.events.pop_back();
    }
  }
  RLM_CUDA_CHECK(cudaSetDevice(device.index));
  if (host_ == nullptr) {
    capacity_ = std::max<size_t>(nbytes, 4096);
    RLM_CUDA_CHECK(cudaMallocHost(&host_, capacity_));
  }
  if (event == nullptr) RLM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  event_ = event;
  const auto stream = static_cast<cudaStream_t>(cuda_stream(device.index));
  if (nbytes > 0) RLM_CUDA_CHECK(cudaMemcpyAsync(host_, src, nbytes, cudaMemcpyDeviceToHost, stream));
  RLM_CUDA_CHECK(cudaEventRecord(event, stream));
#else
  RLM_CHECK(false) << "AsyncDownload from " << device.to_string() << " in a build without CUDA";
#endif
}

const void* AsyncDownload::wait() {
#ifdef RADIXLM_WITH_CUDA
  if (!waited_) RLM_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
#endif
  waited_ = true;
  return host_;
}

AsyncDownload::~AsyncDownload() {
  if (device_.is_cpu()) {
    std::free(host_);
    return;
  }
#ifdef RADIXLM_WITH_CUDA
  if (!waited_ && event_ != nullptr) cudaEventSynchronize(static_cast<cudaEvent_t>(event_));  // the block is reused
  DownloadPool& pool = download_pool();
  std::lock_guard<std::mutex> lock(pool.mutex);
  if (host_ != nullptr) pool.blocks.emplace_back(host_, capacity_);
  if (event_ != nullptr) pool.events.push_back(static_cast<cudaEvent_t>(event_));
#endif
}

}  // namespace rlm
