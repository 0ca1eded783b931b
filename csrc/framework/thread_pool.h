// The one intra-op thread pool. Workers block on a condition variable when idle (no spinning
// against torch's own pool); the calling thread always takes part in the work.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tob {

class ThreadPool {
 public:
  // num_threads counts the caller: ThreadPool(1) runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into at most num_threads() contiguous chunks of at least `min_grain`
  // iterations and runs fn(begin, end) on each; returns when all are done. Chunks are claimed,
  // not assigned: when a worker is slow to wake (the other core is busy), the caller runs its
  // chunk too. Re-entrant calls from inside fn run inline.
  void ParallelFor(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn);

  // Process-wide pools, one per size, so sessions with the same setting share threads.
  static std::shared_ptr<ThreadPool> Shared(int num_threads);

 private:
  void WorkerLoop();

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::mutex call_mu_;  // one ParallelFor at a time per pool
  // One ParallelFor call. Workers hold it by shared_ptr, so a worker that wakes late only ever
  // sees an exhausted claim counter of a finished job, never a half-built new one.
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> remaining{0};  // chunks not finished yet
  };
  // Claims and runs chunks of `job` until none is left; returns how many it ran.
  static int64_t RunClaimedChunks(Job& job);

  std::shared_ptr<Job> job_;
  int64_t generation_ = 0;
  bool stop_ = false;
};

// Runs fn over [0, n) on `pool`, or inline when pool is null or n is small.
void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_grain,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tob
