// The one intra-op thread pool; the calling thread always takes part in the work.
//
// Idle workers first spin (a bounded busy-wait on the job counter, kSpinMicros) and only then
// block on a condition variable. A session runs its nodes back to back, so a worker that spins
// between two nodes picks the next job up within a few hundred nanoseconds; a worker woken
// through the condition variable takes tens of microseconds on a loaded machine, longer than
// the work of a small GEMM or elementwise node, so without the spin the caller ends up running
// every chunk itself. The spin is bounded, so between session runs (when torch's own threads
// need the cores) the workers sleep.
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
  // num_threads counts the caller: ThreadPool(1) runs everything inline. The workers start on
  // the first ParallelFor that needs them, so a pool whose work all goes to an external runtime
  // never adds a thread to the process.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  // A pool that follows the external runtime (SetExternalParallelRuntime): while one is
  // installed, all its work goes there at that runtime's current thread count, whatever it is;
  // otherwise it runs on num_threads threads of its own. Shared(0) hands out this kind.
  static std::unique_ptr<ThreadPool> Following(int num_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The parallelism ParallelFor gives: the external runtime's for a following pool while one is
  // installed, else the pool's own size.
  int num_threads() const;

  // Splits [0, n) into at most num_threads() contiguous chunks of at least `min_grain`
  // iterations and runs fn(begin, end) on each; returns when all are done. Chunks are claimed,
  // not assigned: when a worker is slow to wake (the other core is busy), the caller runs its
  // chunk too. Re-entrant calls from inside fn run inline. When an external runtime of the same
  // size is installed (SetExternalParallelRuntime), the work goes to it instead.
  void ParallelFor(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn);

  // Process-wide pools, one per size, so sessions with the same setting share threads. Size 0 is
  // the following pool (see Following), with hardware_concurrency() threads of its own.
  static std::shared_ptr<ThreadPool> Shared(int num_threads);

 private:
  void WorkerLoop();
  void StartWorkers();

  int num_threads_;
  bool follow_external_ = false;
  std::vector<std::thread> workers_;
  std::once_flag workers_started_;
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

  std::shared_ptr<Job> job_;            // guarded by mu_
  std::atomic<int64_t> generation_{0};  // bumped under mu_, read by spinning workers without it
  int sleepers_ = 0;                    // workers blocked on work_cv_; guarded by mu_
  std::atomic<bool> stop_{false};
};

// A process-wide parallel runtime that pools of its size hand their work to instead of using
// their own workers. The torch provider installs torch's intra-op pool (at::parallel_for), so in
// a process that runs torch the engine and torch share one set of threads: two pools on the
// same cores, each spinning while the other works, halve the speed of both. Both functions must
// be safe to call from any thread; nullptr uninstalls.
struct ExternalParallelRuntime {
  int (*num_threads)();
  void (*parallel_for)(int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn);
};
void SetExternalParallelRuntime(const ExternalParallelRuntime* runtime);
const ExternalParallelRuntime* GetExternalParallelRuntime();

// Runs fn over [0, n) on `pool`, or inline when pool is null or n is small.
void ParallelFor(ThreadPool* pool, int64_t n, int64_t min_grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tob
