// A small process-wide pool of worker threads for the CPU kernels. parallel_for splits [0, n)
// into contiguous chunks and runs them on the workers and the calling thread. Work items must be
// independent (no cross-item reductions), so results never depend on the thread count.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rlm::cpu {

class ThreadPool {
 public:
  // num_threads counts the calling thread: num_threads - 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least `grain` items (except
  // possibly the last). Blocks until all chunks are done; rethrows the first exception thrown by fn.
  // A call made while the pool is busy (from a worker, or from another thread) runs inline.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The shared pool, sized from std::thread::hardware_concurrency() (or RADIXLM_CPU_THREADS).
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // held by the thread that owns the current job
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t chunk_ = 0;
  int64_t next_ = 0;         // next chunk start handed out (guarded by mutex_)
  int64_t pending_ = 0;      // chunks not yet finished
  uint64_t generation_ = 0;  // bumped per job so sleeping workers notice new work
  bool stop_ = false;
  std::exception_ptr error_;
};

// ThreadPool::global().parallel_for(n, grain, fn).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace rlm::cpu
