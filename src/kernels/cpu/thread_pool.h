// A small process-wide pool of worker threads for the CPU kernels. parallel_for splits [0, n)
// into contiguous chunks and runs them on the workers and the calling thread. Work items must be
// independent (no cross-item reductions), so results never depend on the thread count.
//
// A decode step makes a few hundred short parallel_for calls (one per linear layer), so handing
// out work must cost microseconds: after a job, workers spin on an atomic job counter for a while
// (kSpinMicros) before they sleep on a condition variable, and chunks are claimed with atomics.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
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
  // Restarts the pool with `num_threads` threads (>= 1). Must not run concurrently with a
  // parallel_for on this pool.
  void resize(int num_threads);

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each at least `grain` items (except
  // possibly the last) and about chunks_per_thread per thread otherwise. Blocks until all chunks are
  // done; rethrows the first exception thrown by fn. A call made while the pool is busy (from a
  // worker, or from another thread) runs inline. More chunks per thread shorten the wait for the
  // last chunk at the end of a long call (a prefill's linears) but cost a short one (a decode
  // step's) more than they save.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                    int chunks_per_thread = kChunksPerThread);

  static constexpr int kChunksPerThread = 4;         // the default: balances uneven items cheaply
  static constexpr int kLongCallChunksPerThread = 16;  // calls of milliseconds per chunk at the default

  // The shared pool, sized from std::thread::hardware_concurrency() (or RADIXLM_CPU_THREADS).
  static ThreadPool& global();

  static constexpr int kSpinMicros = 200;  // how long an idle worker polls before sleeping

 private:
  void start(int num_threads);
  void stop();
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};  // a job owns the pool
  // Job publication: odd while the owner writes the job fields, even once they are published.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> active_{0};      // workers reading the current job's fields
  std::atomic<int64_t> next_{0};    // next chunk start
  std::atomic<int64_t> pending_{0};  // chunks not yet finished
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t chunk_ = 0;
  std::mutex mutex_;  // sleeping workers, the stop flag and the first error
  std::condition_variable work_cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

// ThreadPool::global().parallel_for(n, grain, fn, chunks_per_thread).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                  int chunks_per_thread = ThreadPool::kChunksPerThread);

// Threads of the shared pool (the calling thread included), and setting it (e.g. --threads; also
// OpenBLAS's thread count).
int num_threads();
void set_num_threads(int num_threads);

}  // namespace rlm::cpu
