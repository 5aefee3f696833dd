#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <exception>

namespace rlm::cpu {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int /*index*/) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && next_ < job_n_); });
    if (stop_) return;
    seen = generation_;
    while (next_ < job_n_) {
      int64_t begin = next_;
      int64_t end = std::min(job_n_, begin + chunk_);
      next_ = end;
      const auto* job = job_;
      lock.unlock();
      std::exception_ptr err;
      try {
        (*job)(begin, end);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  std::unique_lock<std::mutex> run_lock(run_mutex_, std::try_to_lock);
  if (workers_.empty() || n <= grain || !run_lock.owns_lock()) {
    fn(0, n);
    return;
  }
  // About 4 chunks per thread balances uneven items (e.g. long and short requests).
  int64_t chunk = std::max(grain, (n + 4 * num_threads() - 1) / (4 * num_threads()));
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  job_n_ = n;
  chunk_ = chunk;
  next_ = 0;
  pending_ = (n + chunk - 1) / chunk;
  error_ = nullptr;
  ++generation_;
  work_cv_.notify_all();
  while (next_ < job_n_) {
    int64_t begin = next_;
    int64_t end = std::min(job_n_, begin + chunk_);
    next_ = end;
    lock.unlock();
    std::exception_ptr err;
    try {
      fn(begin, end);
    } catch (...) {
      err = std::current_exception();
    }
    lock.lock();
    if (err && !error_) error_ = err;
    --pending_;
  }
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  job_n_ = 0;
  std::exception_ptr err = error_;
  error_ = nullptr;
  lock.unlock();
  if (err) std::rethrow_exception(err);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("RADIXLM_CPU_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return n;
    }
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }());
  return pool;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, grain, fn);
}

}  // namespace rlm::cpu
