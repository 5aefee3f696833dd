#include "kernels/cpu/thread_pool.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace rlm::cpu {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) { start(num_threads); }

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::start(int num_threads) {
  stop_ = false;
  for (int i = 1; i < std::max(1, num_threads); ++i) workers_.emplace_back([this] { worker_loop(); });
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::resize(int num_threads) {
  if (std::max(1, num_threads) == this->num_threads()) return;
  bool expected = false;
  while (!busy_.compare_exchange_weak(expected, true)) {
    expected = false;
    std::this_thread::yield();
  }
  stop();
  start(num_threads);
  busy_ = false;
}

// Workers claim chunks until none are left; every claimed chunk is counted off `pending_`.
void ThreadPool::run_chunks() {
  const auto& fn = *job_;
  const int64_t n = job_n_, chunk = chunk_;
  while (true) {
    const int64_t begin = next_.fetch_add(chunk);
    if (begin >= n) return;
    try {
      fn(begin, std::min(n, begin + chunk));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1);
  }
}

void ThreadPool::worker_loop() {
  using Clock = std::chrono::steady_clock;
  uint64_t seen = generation_.load();
  while (true) {
    // Wait for a published job newer than the last one: spin first, then sleep.
    uint64_t g = generation_.load();
    const auto spin_until = Clock::now() + std::chrono::microseconds(kSpinMicros);
    for (int i = 0; (g == seen || (g & 1)) && !stop_.load(std::memory_order_relaxed); ++i) {
      cpu_relax();
      if ((i & 63) == 63 && Clock::now() > spin_until) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        work_cv_.wait(lock, [&] {
          const uint64_t now = generation_.load();
          return stop_.load() || (now != seen && !(now & 1));
        });
        sleepers_.fetch_sub(1);
      }
      g = generation_.load();
    }
    if (stop_.load()) return;
    // Check in, then make sure the job is still the one seen (its owner waits for active_ == 0
    // before it rewrites the fields).
    active_.fetch_add(1);
    if (generation_.load() == g) run_chunks();
    active_.fetch_sub(1);
    seen = g;
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                              int chunks_per_thread) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  bool expected = false;
  if (workers_.empty() || n <= grain || !busy_.compare_exchange_strong(expected, true)) {
    fn(0, n);
    return;
  }
  // Several chunks per thread balance uneven items (e.g. long and short requests).
  const int64_t chunks = static_cast<int64_t>(std::max(1, chunks_per_thread)) * num_threads();
  const int64_t chunk = std::max(grain, (n + chunks - 1) / chunks);
  // Unpublish (odd generation), wait until no worker still reads the previous job, then write.
  generation_.fetch_add(1);
  while (active_.load() != 0) cpu_relax();
  job_ = &fn;
  job_n_ = n;
  chunk_ = chunk;
  error_ = nullptr;
  pending_.store((n + chunk - 1) / chunk);
  next_.store(0);
  generation_.fetch_add(1);  // published
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    work_cv_.notify_all();
  }
  run_chunks();
  while (pending_.load() != 0) cpu_relax();
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    err = error_;
    error_ = nullptr;
  }
  busy_ = false;
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

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                  int chunks_per_thread) {
  ThreadPool::global().parallel_for(n, grain, fn, chunks_per_thread);
}

int num_threads() { return ThreadPool::global().num_threads(); }

void set_num_threads(int num_threads) {
  ThreadPool::global().resize(num_threads);
  openblas_set_num_threads(std::max(1, num_threads));  // the f32 / 16-bit linears (sgemm)
}

}  // namespace rlm::cpu
